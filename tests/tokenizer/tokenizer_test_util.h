// Small in-memory vocabularies for the tokenizer unit tests.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace vlmd::engine::tokenizer::test {

// Byte-level BPE vocabulary: the 256 GPT-2 byte characters (ids 0..255) followed by `extra`
// normal tokens, then `control` and `user_defined` tokens; pre-tokenizer "gpt-2".
inline VocabData MakeBpeVocab(const std::vector<std::string>& extra,
                              const std::vector<std::string>& merges,
                              const std::vector<std::string>& control = {},
                              const std::vector<std::string>& user_defined = {}) {
  VocabData d;
  d.model = "gpt2";
  d.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) {
    d.tokens.emplace_back(ByteToBpeChar(static_cast<uint8_t>(b)));
    d.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  }
  auto add = [&](const std::vector<std::string>& list, TokenType type) {
    for (const std::string& t : list) {
      d.tokens.push_back(t);
      d.token_types.push_back(static_cast<int32_t>(type));
    }
  };
  add(extra, TokenType::kNormal);
  add(control, TokenType::kControl);
  add(user_defined, TokenType::kUserDefined);
  d.merges = merges;
  return d;
}

// SentencePiece vocabulary: <unk>=0 (unknown), <s>=1, </s>=2 (control), <0x00>..<0xFF> = 3..258
// (byte), then `pieces` (normal) with the given scores.
inline VocabData MakeSpmVocab(const std::vector<std::pair<std::string, float>>& pieces) {
  VocabData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.token_types = {2, 3, 3};
  d.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    d.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    d.token_types.push_back(6);
    d.scores.push_back(0);
  }
  for (const auto& [text, score] : pieces) {
    d.tokens.push_back(text);
    d.token_types.push_back(1);
    d.scores.push_back(score);
  }
  return d;
}

inline Tokenizer Build(VocabData d) {
  auto tok = Tokenizer::FromVocabData(std::move(d));
  if (!tok.ok()) {
    ADD_FAILURE() << tok.status().ToString();
    std::abort();
  }
  return std::move(tok).value();
}

inline std::vector<TokenId> Ids(const Tokenizer& tok, std::string_view text, bool add_special,
                                bool parse_special) {
  auto ids = tok.Tokenize(text, add_special, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

}  // namespace vlmd::engine::tokenizer::test
