// Tokenizer facade (see tokenizer.h): special-token partitioning, BOS/EOS, dispatch to the BPE or
// SPM encoder, pieces and detokenization, following llama.cpp's llama_vocab::impl::tokenize,
// token_to_piece and detokenize (src/llama-vocab.cpp @3f545be).
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "engine/gguf/gguf_reader.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/encoders.h"
#include "engine/tokenizer/unicode.h"

namespace vlmd::engine::tokenizer {
namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // U+2581 "▁"

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s->size());
  size_t pos = 0;
  for (size_t hit; (hit = s->find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(*s, pos, hit - pos);
    out.append(to);
  }
  out.append(*s, pos, std::string::npos);
  s->swap(out);
}

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// llama_detokenize's clean_up_tokenization_spaces: " ?" " !" " ." " ," lose their space, a lone
// " ' " loses both, and " 's" " 'm" " 're" " 've" lose theirs.
std::string CleanSpaces(const std::string& in) {
  std::string a;  // pass 2 edits it in place
  for (size_t i = 0; i < in.size(); ++i) {
    const char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b += x;
      a[++i] = '\0';  // drop the following space; like llama.cpp, it no longer counts as one
      continue;
    }
    b += x;
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      const char x2 = i + 2 < b.size() ? b[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) {
        c.pop_back();
      }
    }
    c += x;
  }
  return c;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab, std::optional<PreTokenizer> pre, bool pre_defaulted)
    : vocab_(std::move(vocab)), pre_(std::move(pre)), pre_defaulted_(pre_defaulted) {
  pieces_.resize(vocab_.n_tokens());
  for (TokenId id = 0; id < vocab_.n_tokens(); ++id) pieces_[id] = ComputePiece(id);
  for (const TokenId id : vocab_.special_tokens()) {
    const uint32_t attributes = vocab_.attributes(id);
    if (!(attributes & (attr::kControl | attr::kUnknown)) && IsPromptMarkerText(vocab_.text(id))) {
      guarded_markers_.push_back(id);
    }
  }
  std::sort(guarded_markers_.begin(), guarded_markers_.end());
}

bool Tokenizer::guarded_in_literal(TokenId id) const {
  if (!vocab_.IsValid(id)) return false;
  if (vocab_.attributes(id) & (attr::kControl | attr::kUnknown)) return true;
  return std::binary_search(guarded_markers_.begin(), guarded_markers_.end(), id);
}

Result<Tokenizer> Tokenizer::FromGguf(const gguf::GgufFile& file) {
  VLMD_ASSIGN_OR_RETURN(VocabData data, ReadVocabData(file));
  return FromVocabData(std::move(data));
}

Result<Tokenizer> Tokenizer::FromVocabData(VocabData data) {
  std::optional<PreTokenizer> pre;
  bool defaulted = false;
  VocabDefaults defaults;
  if (data.model == "gpt2") {
    defaulted = !data.pre.has_value() || data.pre->empty();
    auto created = PreTokenizer::Create(defaulted ? "default" : *data.pre);
    if (!created.ok()) return created.status();
    pre = std::move(created).value();
    defaults.add_bos = pre->traits().add_bos;
    defaults.ignore_merges = pre->traits().ignore_merges;
    defaults.clean_spaces = pre->traits().clean_spaces;
  }
  VLMD_ASSIGN_OR_RETURN(Vocab vocab, Vocab::Build(std::move(data), defaults));
  return Tokenizer(std::move(vocab), std::move(pre), defaulted);
}

std::vector<Tokenizer::Fragment> Tokenizer::Partition(std::string_view text, bool parse_special,
                                                      std::span<const TextRange> literal) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({kNoToken, 0, text.size()});
  std::vector<Fragment> next;
  // Longest special text first; each one is cut out of every remaining text fragment.
  for (const TokenId special : vocab_.special_tokens()) {
    const uint32_t attributes = vocab_.attributes(special);
    const bool control = (attributes & (attr::kControl | attr::kUnknown)) != 0;
    if (!parse_special && control) continue;
    const std::string& needle = vocab_.text(special);
    if (text.find(needle) == std::string_view::npos) continue;
    // A guarded token's text that touches a client's words is text (PromptText); the search
    // goes on one byte later, so a template marker right after such words is still found.
    const bool skip_literal = !literal.empty() && guarded_in_literal(special);
    next.clear();
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      size_t base = fragment.offset;
      size_t length = fragment.length;
      size_t from = base;
      while (length > 0) {
        const size_t match = text.substr(0, base + length).find(needle, from);
        if (match == std::string_view::npos) {
          next.push_back({kNoToken, base, length});
          break;
        }
        if (skip_literal && OverlapsAny(literal, match, match + needle.size())) {
          from = match + 1;
          continue;
        }
        size_t left_length = match - base;
        if (attributes & attr::kLstrip) {
          while (left_length > 0 && IsSpace(text[base + left_length - 1])) --left_length;
        }
        if (left_length > 0) next.push_back({kNoToken, base, left_length});
        next.push_back({special, 0, 0});
        size_t right_offset = match + needle.size();
        size_t right_length = base + length - right_offset;
        if (attributes & attr::kRstrip) {
          while (right_length > 0 && IsSpace(text[right_offset])) {
            ++right_offset;
            --right_length;
          }
        }
        base = right_offset;
        length = right_length;
        from = base;
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

Status Tokenizer::EncodeBpeText(std::string_view text, std::vector<TokenId>* out) const {
  const std::string clean = SanitizeUtf8(text);
  std::vector<std::string_view> words;
  VLMD_RETURN_IF_ERROR(pre_->Split(clean, &words));
  std::string encoded;
  for (std::string_view word : words) {
    encoded.clear();
    for (char c : word) encoded.append(ByteToBpeChar(static_cast<uint8_t>(c)));
    BpeEncodeWord(vocab_, encoded, out);
  }
  return Status::Ok();
}

Result<std::vector<TokenId>> Tokenizer::Tokenize(std::string_view text, bool add_special,
                                                 bool parse_special,
                                                 std::span<const TextRange> literal) const {
  std::vector<TokenId> out;
  const std::vector<Fragment> fragments = Partition(text, parse_special, literal);
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());
  if (vocab_.type() == VocabType::kSpm) {
    bool prev_special = true;  // the first fragment gets the space prefix too
    std::string escaped;
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        out.push_back(fragment.token);
        prev_special = true;
        continue;
      }
      escaped.clear();
      if (vocab_.add_space_prefix() && prev_special) escaped.push_back(' ');
      escaped.append(text.substr(fragment.offset, fragment.length));
      ReplaceAll(&escaped, " ", kSpaceEscape);
      SpmEncode(vocab_, escaped, &out);
      prev_special = false;
    }
  } else {
    for (const Fragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        out.push_back(fragment.token);
      } else {
        VLMD_RETURN_IF_ERROR(EncodeBpeText(text.substr(fragment.offset, fragment.length), &out));
      }
    }
  }
  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  return out;
}

std::string Tokenizer::ComputePiece(TokenId id) const {
  const uint32_t attributes = vocab_.attributes(id);
  const std::string& text = vocab_.text(id);
  if (attributes & (attr::kUnknown | attr::kControl | attr::kUserDefined)) return text;
  if (attributes & attr::kNormal) {
    if (vocab_.type() == VocabType::kSpm) {
      std::string piece = text;
      ReplaceAll(&piece, kSpaceEscape, " ");
      return piece;
    }
    std::string piece;
    bool marked = false;
    for (size_t offset = 0; offset < text.size();) {
      const size_t start = offset;
      const uint32_t cpt = DecodeUtf8Lenient(text, &offset);
      const int byte = BpeCharToByte(cpt);
      if (byte >= 0) {
        piece.push_back(static_cast<char>(byte));
        continue;
      }
      // Not in the byte alphabet: llama.cpp's marker, so that the problem stays visible. It
      // repeats the token's text for every such character; here only the first marker does (a
      // crafted token of 16,000 CJK characters took 4.8 s and 786 MB at load, quadratic).
      static constexpr char kHex[] = "0123456789abcdef";
      piece += "[UNK_BYTE_0x";
      for (size_t k = start; k < offset; ++k) {
        const auto b = static_cast<uint8_t>(text[k]);
        piece += kHex[b >> 4];
        piece += kHex[b & 15];
      }
      if (!marked) piece += text;
      piece += "]";
      marked = true;
    }
    return piece;
  }
  if (attributes & attr::kByte) return std::string(1, static_cast<char>(vocab_.byte_value(id)));
  return "";  // undefined / unused tokens have no text
}

std::string_view Tokenizer::TokenToPiece(TokenId id, bool special) const {
  if (!vocab_.IsValid(id)) return {};
  if (!special && (vocab_.attributes(id) & (attr::kUnknown | attr::kControl))) return {};
  return pieces_[id];
}

std::string Tokenizer::Detokenize(std::span<const TokenId> ids, bool remove_special,
                                  bool unparse_special) const {
  bool remove_space = vocab_.add_space_prefix();
  if (remove_special && vocab_.add_bos() && !ids.empty() && ids.front() == vocab_.bos()) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && vocab_.add_eos() && !ids.empty() && ids.back() == vocab_.eos()) {
    ids = ids.first(ids.size() - 1);
  }
  std::string text;
  for (const TokenId id : ids) {
    std::string_view piece = TokenToPiece(id, unparse_special);
    if (remove_space && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    remove_space = false;
    text.append(piece);
  }
  return vocab_.clean_spaces() ? CleanSpaces(text) : text;
}

}  // namespace vlmd::engine::tokenizer
