// Vocabulary loading and validation (see vocab.h). Load-time behaviour mirrors llama.cpp's
// llama_vocab::impl::load (src/llama-vocab.cpp @3f545be) wherever it changes token ids.
#include "engine/tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/gguf/gguf_reader.h"

namespace vlmd::engine::tokenizer {
namespace {

std::string MergeKey(std::string_view left, std::string_view right) {
  std::string key;
  key.reserve(4 + left.size() + right.size());
  const uint32_t n = static_cast<uint32_t>(left.size());
  key.append(reinterpret_cast<const char*>(&n), sizeof(n));
  key.append(left);
  key.append(right);
  return key;
}

uint32_t AttributesOf(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal: return attr::kNormal;
    case TokenType::kUnknown: return attr::kUnknown;
    case TokenType::kControl: return attr::kControl;
    case TokenType::kUserDefined: return attr::kUserDefined;
    case TokenType::kUnused: return attr::kUnused;
    case TokenType::kByte: return attr::kByte;
    default: return attr::kUndefined;
  }
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Parses "<0xHH>" into its byte; -1 if `text` has another form.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int hi = HexDigit(text[3]);
  const int lo = HexDigit(text[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// Reads an optional key with `getter`; absent -> nullopt, present with a bad type -> error.
template <typename T, typename Getter>
Status ReadOptional(const gguf::GgufFile& file, std::string_view key, Getter getter,
                    std::optional<T>* out) {
  if (file.Find(key) == nullptr) return Status::Ok();
  auto value = getter(key);
  if (!value.ok()) return value.status();
  *out = T(std::move(value).value());
  return Status::Ok();
}

std::vector<std::string> ToStrings(const std::vector<std::string_view>& views) {
  return std::vector<std::string>(views.begin(), views.end());
}

// Token texts that llama.cpp treats as end-of-turn / end-of-generation whatever their declared
// type (its metadata lacks a flag for them); such tokens are also forced to be control tokens.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
};
// Fill-in-the-middle controls, found by text when the GGUF does not name them: a model that
// emits one has left the conversation, so llama.cpp ends generation there too.
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};

}  // namespace

Result<VocabData> ReadVocabData(const gguf::GgufFile& file) {
  VocabData data;
  auto model = file.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status().WithContext("vocabulary");
  data.model = std::string(*model);
  auto tokens = file.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status().WithContext("vocabulary");
  data.tokens = ToStrings(*tokens);

  auto get_string = [&](std::string_view k) { return file.GetString(k); };
  auto get_i64 = [&](std::string_view k) { return file.GetI64(k); };
  auto get_bool = [&](std::string_view k) { return file.GetBool(k); };
  auto get_strings = [&](std::string_view k) -> Result<std::vector<std::string>> {
    auto v = file.GetStringArray(k);
    if (!v.ok()) return v.status();
    return ToStrings(*v);
  };

  std::optional<std::string> name;
  VLMD_RETURN_IF_ERROR(ReadOptional(file, "tokenizer.ggml.pre", get_string, &data.pre));
  VLMD_RETURN_IF_ERROR(ReadOptional(file, "general.name", get_string, &name));
  data.name = name.value_or("");
  VLMD_RETURN_IF_ERROR(ReadOptional(file, "tokenizer.ggml.merges", get_strings, &data.merges));
  VLMD_RETURN_IF_ERROR(
      ReadOptional(file, "tokenizer.chat_template", get_string, &data.chat_template));

  if (file.Find("tokenizer.ggml.scores") != nullptr) {
    auto scores = file.GetF32Array("tokenizer.ggml.scores");
    if (scores.ok()) {
      data.scores = std::move(scores).value();
    } else {  // llama.cpp also accepts integer scores
      auto iscores = file.GetI32Array("tokenizer.ggml.scores");
      if (!iscores.ok()) return scores.status();
      data.scores.assign(iscores->begin(), iscores->end());
    }
  }
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    auto types = file.GetI32Array("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status();
    data.token_types = std::move(types).value();
  }

  const std::pair<std::string_view, std::optional<int64_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &data.bos_id},
      {"tokenizer.ggml.eos_token_id", &data.eos_id},
      {"tokenizer.ggml.unknown_token_id", &data.unk_id},
      {"tokenizer.ggml.padding_token_id", &data.pad_id},
      {"tokenizer.ggml.eot_token_id", &data.eot_id},
      {"tokenizer.ggml.eom_token_id", &data.eom_id},
      {"tokenizer.ggml.fim_pad_token_id", &data.fim_pad_id},
      {"tokenizer.ggml.fim_rep_token_id", &data.fim_rep_id},
      {"tokenizer.ggml.fim_sep_token_id", &data.fim_sep_id},
  };
  for (const auto& [key, out] : ids) VLMD_RETURN_IF_ERROR(ReadOptional(file, key, get_i64, out));
  VLMD_RETURN_IF_ERROR(ReadOptional(file, "tokenizer.ggml.add_bos_token", get_bool, &data.add_bos));
  VLMD_RETURN_IF_ERROR(ReadOptional(file, "tokenizer.ggml.add_eos_token", get_bool, &data.add_eos));
  VLMD_RETURN_IF_ERROR(
      ReadOptional(file, "tokenizer.ggml.add_space_prefix", get_bool, &data.add_space_prefix));
  return data;
}

TokenId Vocab::Find(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? kNoToken : it->second;
}

int32_t Vocab::MergeRank(std::string_view left, std::string_view right) const {
  auto it = merge_ranks_.find(MergeKey(left, right));
  return it == merge_ranks_.end() ? -1 : it->second;
}

Result<Vocab> Vocab::Build(VocabData data, const VocabDefaults& defaults) {
  Vocab v;
  if (data.model == "gpt2") {
    v.type_ = VocabType::kBpe;
  } else if (data.model == "llama") {
    v.type_ = VocabType::kSpm;
  } else {
    return UnimplementedError("unsupported tokenizer model (tokenizer.ggml.model) '" +
                              data.model + "'");
  }
  const size_t n = data.tokens.size();
  if (n == 0) return DataLossError("vocabulary: tokenizer.ggml.tokens is empty");
  // The largest vocabularies shipped are ~262k (Gemma 3); a file's token list is otherwise
  // bounded only by its size, and 2M empty tokens (a 16 MB file) took 330 MB and 5.5 s to load.
  constexpr size_t kMaxTokens = size_t{1} << 20;
  if (n > kMaxTokens) {
    return DataLossError("vocabulary: " + std::to_string(n) + " tokens, more than the " +
                         std::to_string(kMaxTokens) + " vlmd loads");
  }
  if (!data.scores.empty() && data.scores.size() != n) {
    return DataLossError("vocabulary: tokenizer.ggml.scores has " +
                         std::to_string(data.scores.size()) + " entries for " +
                         std::to_string(n) + " tokens");
  }
  // A NaN score breaks the strict weak order of SentencePiece's merge queue (undefined
  // behaviour in std::priority_queue); infinities order fine.
  for (size_t i = 0; i < data.scores.size(); ++i) {
    if (std::isnan(data.scores[i])) {
      return DataLossError("vocabulary: tokenizer.ggml.scores entry " + std::to_string(i) +
                           " is NaN");
    }
  }
  if (!data.token_types.empty() && data.token_types.size() != n) {
    return DataLossError("vocabulary: tokenizer.ggml.token_type has " +
                         std::to_string(data.token_types.size()) + " entries for " +
                         std::to_string(n) + " tokens");
  }

  v.tokens_.resize(n);
  v.token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Token& t = v.tokens_[i];
    t.text = std::move(data.tokens[i]);
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    if (!v.token_to_id_.emplace(t.text, static_cast<int32_t>(i)).second) {
      return DataLossError("vocabulary: duplicate token '" + t.text + "' (ids " +
                           std::to_string(v.token_to_id_.find(t.text)->second) + " and " +
                           std::to_string(i) + ")");
    }
    if (!data.scores.empty()) t.score = data.scores[i];
    if (!data.token_types.empty()) t.attributes = AttributesOf(data.token_types[i]);
    if (t.attributes & attr::kByte) {
      const int byte = ParseByteToken(t.text);
      if (byte < 0) {
        return DataLossError("vocabulary: byte token " + std::to_string(i) + " has text '" +
                             t.text + "', expected <0xHH>");
      }
      t.byte = static_cast<uint8_t>(byte);
    }
  }

  if (v.type_ == VocabType::kBpe) {
    if (!data.merges.has_value()) {
      return NotFoundError("vocabulary: BPE model without tokenizer.ggml.merges");
    }
    v.merge_ranks_.reserve(data.merges->size());
    for (size_t i = 0; i < data.merges->size(); ++i) {
      const std::string& merge = (*data.merges)[i];
      // As llama.cpp: split at the first space after position 0; earlier ranks win.
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) continue;
      v.merge_ranks_.emplace(MergeKey(std::string_view(merge).substr(0, space),
                                      std::string_view(merge).substr(space + 1)),
                             static_cast<int32_t>(i));
    }
    v.add_space_prefix_ = false;
    v.clean_spaces_ = defaults.clean_spaces;
    v.ignore_merges_ = defaults.ignore_merges;
    v.add_bos_ = defaults.add_bos;
    v.add_eos_ = false;
    v.bos_ = 11;  // llama.cpp's BPE defaults, used when the file names no BOS/EOS
    v.eos_ = 11;
  } else {
    v.add_space_prefix_ = true;
    v.clean_spaces_ = false;
    v.add_bos_ = true;
    v.add_eos_ = false;
    v.bos_ = 1;
    v.eos_ = 2;
    v.unk_ = 0;
  }
  v.pre_ = data.pre.value_or("");
  v.chat_template_ = std::move(data.chat_template);
  if (data.add_space_prefix) v.add_space_prefix_ = *data.add_space_prefix;
  if (data.add_bos) v.add_bos_ = *data.add_bos;
  if (data.add_eos) v.add_eos_ = *data.add_eos;
  VLMD_RETURN_IF_ERROR(v.ApplySpecialIds(data));

  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const char hex[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
    TokenId id = v.Find(hex);
    if (id == kNoToken) id = v.Find(std::string(1, static_cast<char>(b)));
    v.byte_tokens_[b] = id;
  }

  v.DetectEndOfGeneration();
  for (const Token& t : v.tokens_) v.max_token_bytes_ = std::max(v.max_token_bytes_, t.text.size());

  // llama.cpp's Phi-3 quirk (keyed on general.name): special tokens swallow following spaces.
  std::string lower_name = data.name;
  std::transform(lower_name.begin(), lower_name.end(), lower_name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool phi3 = lower_name.find("phi-3") != std::string::npos ||
                    lower_name.find("phi3") != std::string::npos;

  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    if (v.tokens_[id].attributes & (attr::kControl | attr::kUserDefined | attr::kUnknown)) {
      v.special_tokens_.push_back(id);
    }
  }
  std::stable_sort(v.special_tokens_.begin(), v.special_tokens_.end(), [&](TokenId a, TokenId b) {
    return v.tokens_[a].text.size() > v.tokens_[b].text.size();
  });
  if (phi3) {
    for (TokenId id : v.special_tokens_) v.tokens_[id].attributes |= attr::kRstrip;
    auto set_rstrip = [&](std::string_view text, bool on) {
      const TokenId id = v.Find(text);
      if (id == kNoToken) return;
      if (on) {
        v.tokens_[id].attributes |= attr::kRstrip;
      } else {
        v.tokens_[id].attributes &= ~attr::kRstrip;
      }
    };
    set_rstrip("</s>", true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set_rstrip(t, false);
  }
  for (const Token& t : v.tokens_) {
    v.has_strip_tokens_ |= (t.attributes & (attr::kLstrip | attr::kRstrip)) != 0;
  }
  return v;
}

Status Vocab::ApplySpecialIds(const VocabData& data) {
  const int64_t n = n_tokens();
  // Defaults outside the vocabulary are disabled (as llama.cpp); explicit ids must be valid.
  for (TokenId* id : {&bos_, &eos_, &unk_}) {
    if (*id >= n) *id = kNoToken;
  }
  const std::pair<const char*, std::pair<const std::optional<int64_t>*, TokenId*>> ids[] = {
      {"bos_token_id", {&data.bos_id, &bos_}}, {"eos_token_id", {&data.eos_id, &eos_}},
      {"unknown_token_id", {&data.unk_id, &unk_}}, {"padding_token_id", {&data.pad_id, &pad_}},
      {"eot_token_id", {&data.eot_id, &eot_}}, {"eom_token_id", {&data.eom_id, &eom_}},
      {"fim_pad_token_id", {&data.fim_pad_id, &fim_pad_}},
      {"fim_rep_token_id", {&data.fim_rep_id, &fim_rep_}},
      {"fim_sep_token_id", {&data.fim_sep_id, &fim_sep_}},
  };
  for (const auto& [key, slot] : ids) {
    const std::optional<int64_t>& value = *slot.first;
    if (!value.has_value()) continue;
    if (*value < 0 || *value >= n) {
      return DataLossError("vocabulary: tokenizer.ggml." + std::string(key) + " = " +
                           std::to_string(*value) + " is outside the vocabulary (" +
                           std::to_string(n) + " tokens)");
    }
    *slot.second = static_cast<TokenId>(*value);
  }
  if (add_bos_ && bos_ == kNoToken) {
    return DataLossError("vocabulary: add_bos_token is true but there is no BOS token");
  }
  if (add_eos_ && eos_ == kNoToken) {
    return DataLossError("vocabulary: add_eos_token is true but there is no EOS token");
  }
  return Status::Ok();
}

// llama.cpp's rule (llama-vocab.cpp, load): end-of-turn and end-of-message by text when the GGUF
// names none, the fill-in-the-middle pad / repo / file-separator tokens likewise, and every token
// of kEogTexts; all of them control tokens. Then its two exceptions: vocabularies with
// <|return|> and <|call|> (or <|calls|> and <|flush|>) use <|end|> inside a turn, and one with
// <|tool_response> uses </s> as text.
void Vocab::DetectEndOfGeneration() {
  auto contains = [](const auto& list, std::string_view text) {
    return std::find(std::begin(list), std::end(list), text) != std::end(list);
  };
  auto find_once = [&](TokenId* slot, const auto& texts, Token& t, int32_t id) {
    if (*slot == kNoToken && contains(texts, t.text)) {
      *slot = id;
      t.attributes |= attr::kControl;
    }
  };
  for (int32_t id = 0; id < n_tokens(); ++id) {
    Token& t = tokens_[id];
    find_once(&eot_, kEotTexts, t, id);
    find_once(&eom_, std::array<std::string_view, 1>{"<|eom_id|>"}, t, id);
    find_once(&fim_pad_, kFimPadTexts, t, id);
    find_once(&fim_rep_, kFimRepTexts, t, id);
    find_once(&fim_sep_, kFimSepTexts, t, id);
    if (contains(kEogTexts, t.text)) {
      eog_.insert(id);
      t.attributes |= attr::kControl;
    }
  }
  for (TokenId id : {eos_, eot_, eom_, fim_pad_, fim_rep_, fim_sep_}) {
    if (id != kNoToken) eog_.insert(id);
  }
  auto eog_with_text = [&](std::string_view text) -> TokenId {
    for (TokenId id : eog_) {
      if (tokens_[id].text == text) return id;
    }
    return kNoToken;
  };
  const TokenId end = eog_with_text("<|end|>");
  const bool has_call = eog_with_text("<|call|>") != kNoToken || eog_with_text("<|calls|>") != kNoToken;
  if (end != kNoToken && has_call &&
      (eog_with_text("<|return|>") != kNoToken || eog_with_text("<|flush|>") != kNoToken)) {
    eog_.erase(end);
    tokens_[end].attributes = attr::kUserDefined;
  }
  const TokenId s_close = eog_with_text("</s>");
  if (s_close != kNoToken && eog_with_text("<|tool_response>") != kNoToken) {
    eog_.erase(s_close);
    tokens_[s_close].attributes = attr::kNormal;
  }
}

}  // namespace vlmd::engine::tokenizer
