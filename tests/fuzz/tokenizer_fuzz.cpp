// libFuzzer target for vocabularies and tokenization (engine/tokenizer): the input builds a
// vocabulary and a text, so that crafted vocabularies (odd tokens, merges naming nothing,
// duplicate texts, token types, special ids) and texts meet. Input layout: byte 0 = flags (bit 0:
// SentencePiece "llama" instead of byte-level "gpt2"; bit 1: parse special tokens; bit 2: add
// special tokens; bit 3: token types from byte 1; bit 4: the text's literal ranges (PromptText)
// alternate every (seed & 7) + 1 bytes), byte 1 = seed of the token types and of BOS /
// EOS ids, then '\n'-separated tokens up to the first 0x01 byte, '\n'-separated merges up to the
// first 0x02 byte, then the text. Traps when an accepted vocabulary tokenizes to an id outside
// itself or detokenizes its own ids differently from the concatenated pieces' lengths allow, or
// when the whole text as one literal range tokenizes differently from parse_special = false
// (vocabularies whose user-defined tokens are not chat markers).
// Timeouts and the RSS limit catch blow-ups (a crafted token's pieces were quadratic at load).
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace {

using namespace vlmd::engine::tokenizer;  // NOLINT(build/namespaces): test harness

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

std::vector<std::string> SplitLines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\n') {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0], seed = data[1];
  std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t tokens_end = rest.find('\x01');
  if (tokens_end == std::string_view::npos) return 0;
  std::string_view after = rest.substr(tokens_end + 1);
  const size_t merges_end = after.find('\x02');
  if (merges_end == std::string_view::npos) return 0;
  const std::string_view text = after.substr(merges_end + 1);

  VocabData d;
  const bool spm = (flags & 1) != 0;
  d.model = spm ? "llama" : "gpt2";
  if (!spm) d.pre = "gpt-2";
  d.tokens = SplitLines(rest.substr(0, tokens_end));
  if (d.tokens.size() > 4096) return 0;  // the file's size bounds a real one; keep runs fast
  if (spm) {
    for (size_t i = 0; i < d.tokens.size(); ++i) d.scores.push_back(-static_cast<float>(i));
  } else {
    d.merges = SplitLines(after.substr(0, merges_end));
  }
  if (flags & 8) {
    // 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte (llama.cpp's token types).
    static constexpr int32_t kTypes[] = {1, 1, 1, 2, 3, 4, 6};
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      d.token_types.push_back(kTypes[(seed + i * 7) % (sizeof(kTypes) / sizeof(kTypes[0]))]);
    }
  }
  const int64_t n = static_cast<int64_t>(d.tokens.size());
  if (n > 0 && (seed & 0x80)) {
    d.bos_id = seed % n;
    d.eos_id = (seed / 3) % n;
  }
  auto tok = Tokenizer::FromVocabData(std::move(d));
  if (!tok.ok()) return 0;
  const bool parse_special = (flags & 2) != 0, add_special = (flags & 4) != 0;
  std::vector<TextRange> literal;
  if (flags & 16) {
    const size_t step = (seed & 7) + 1;
    for (size_t at = 0; at < text.size(); at += 2 * step) {
      literal.push_back({at, std::min(text.size(), at + step)});
    }
  }
  auto ids = tok->Tokenize(text, add_special, parse_special, literal);
  if (!ids.ok()) return 0;  // RESOURCE_EXHAUSTED: the regex engine gave up
  bool marker_tokens = false;  // user-defined tokens guarded in literal ranges (marker texts)
  for (const TokenId id : tok->vocab().special_tokens()) {
    marker_tokens |= tok->guarded_in_literal(id) &&
                     !(tok->vocab().attributes(id) & (attr::kControl | attr::kUnknown));
  }
  if (!text.empty() && !marker_tokens) {
    // A client's words as one literal range read control-token text as parse_special = false
    // does (a vocabulary without user-defined marker tokens).
    const TextRange whole[] = {{0, text.size()}};
    auto as_literal = tok->Tokenize(text, add_special, true, whole);
    auto unparsed = tok->Tokenize(text, add_special, false);
    if (as_literal.ok() && unparsed.ok()) Check(*as_literal == *unparsed);
  }
  size_t piece_bytes = 0;
  for (TokenId id : *ids) {
    Check(tok->vocab().IsValid(id));
    piece_bytes += tok->TokenToPiece(id, true).size();
  }
  // Detokenizing drops or respaces some pieces, never adds more than one space per token.
  const std::string back = tok->Detokenize(*ids, false, true);
  Check(back.size() <= piece_bytes + ids->size() + 1);
  return 0;
}
