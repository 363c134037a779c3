// Bad vocabularies (in memory and as GGUF files) give a Status naming the problem, never a crash;
// arbitrary input bytes always tokenize to valid ids.
#include <gtest/gtest.h>

#include <limits>

#include <random>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "tokenizer_test_util.h"

namespace vlmd::engine::tokenizer {
namespace {

using test::MakeBpeVocab;
using test::MakeSpmVocab;

void ExpectError(VocabData d, StatusCode code, std::string_view needle) {
  auto tok = Tokenizer::FromVocabData(std::move(d));
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), code) << tok.status().ToString();
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().ToString();
}

TEST(HostileVocabTest, StructuralErrors) {
  {
    VocabData d = MakeBpeVocab({}, {});
    d.model = "t5";
    ExpectError(d, StatusCode::kUnimplemented, "t5");
  }
  {
    VocabData d = MakeBpeVocab({}, {});
    d.pre = "mystery-pre";
    ExpectError(d, StatusCode::kUnimplemented, "mystery-pre");
  }
  {
    VocabData d = MakeBpeVocab({}, {});
    d.merges.reset();
    ExpectError(d, StatusCode::kNotFound, "merges");
  }
  {
    VocabData d = MakeSpmVocab({{"a", -1}});
    d.scores.pop_back();
    ExpectError(d, StatusCode::kDataLoss, "scores");
  }
  {
    VocabData d = MakeSpmVocab({{"a", -1}});
    d.token_types.push_back(1);
    ExpectError(d, StatusCode::kDataLoss, "token_type");
  }
  {  // a NaN score would break the SentencePiece merge queue's ordering
    VocabData d = MakeSpmVocab({{"a", -1}, {"b", -2}});
    d.scores.back() = std::numeric_limits<float>::quiet_NaN();
    ExpectError(d, StatusCode::kDataLoss, "NaN");
  }
  {
    VocabData d = MakeSpmVocab({{"a", -1}, {"a", -2}});
    ExpectError(d, StatusCode::kDataLoss, "duplicate");
  }
  {
    VocabData d;
    d.model = "llama";
    ExpectError(d, StatusCode::kDataLoss, "empty");
  }
  {
    VocabData d = MakeSpmVocab({});
    d.tokens[3] = "<0xZZ>";
    ExpectError(d, StatusCode::kDataLoss, "<0xZZ>");
  }
  for (int64_t bad : {int64_t{-1}, int64_t{259}, int64_t{1} << 40}) {
    VocabData d = MakeSpmVocab({});
    d.eos_id = bad;
    ExpectError(d, StatusCode::kDataLoss, "eos_token_id");
  }
  {
    VocabData d = MakeBpeVocab({}, {});
    d.bos_id = 300;
    ExpectError(d, StatusCode::kDataLoss, "bos_token_id");
  }
  {
    VocabData d;  // 5 tokens: the BPE default BOS (11) is outside, so add_bos cannot be honoured
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.tokens = {"a", "b", "c", "d", "e"};
    d.merges = std::vector<std::string>{};
    d.add_bos = true;
    ExpectError(d, StatusCode::kDataLoss, "BOS");
  }
  {
    VocabData d = MakeSpmVocab({});
    d.tokens.resize((size_t{1} << 20) + 1);  // empty tokens past the bound
    d.scores.clear();
    d.token_types.clear();
    ExpectError(d, StatusCode::kDataLoss, "more than the 1048576");
  }
}

TEST(HostileVocabTest, GarbageMergesLoadAndTokenize) {
  // Merges whose parts are not tokens, lack a space, or repeat: loadable, and tokenization falls
  // back to bytes (dropping what has no token, like llama.cpp) without crashing.
  VocabData d;
  d.model = "gpt2";
  d.pre = "gpt-2";
  d.tokens = {"a", "b", "ab", "abc"};
  d.merges = std::vector<std::string>{"a b", "ab c", "nospace", "a b", " x y", "q r"};
  auto tok = Tokenizer::FromVocabData(d);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto ids = tok->Tokenize("abc ab\xFF", false, false);
  ASSERT_TRUE(ids.ok());
  // "abc" merges fully; " ab" -> "Ġ" (no token, its bytes neither: dropped) + "ab"; U+FFFD dropped.
  EXPECT_EQ(*ids, (std::vector<TokenId>{3, 2}));
}

// A byte-level BPE token of characters outside the byte alphabet decodes to markers naming
// their bytes, the token's text once: a crafted 20,000-character token repeated its text per
// character (1.2 GB of pieces, quadratic, at load).
TEST(HostileVocabTest, LongTokensOutsideTheByteAlphabetStayLinear) {
  std::string cjk;
  for (int i = 0; i < 20000; ++i) cjk += "\xE4\xB8\xAD";  // U+4E2D
  VocabData d;
  d.model = "gpt2";
  d.pre = "gpt-2";
  d.tokens = {"a", "b", cjk};
  d.merges = std::vector<std::string>{"a b"};
  auto tok = Tokenizer::FromVocabData(d);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string_view piece = tok->TokenToPiece(2, false);
  EXPECT_EQ(piece.rfind("[UNK_BYTE_0xe4b8ad" + cjk + "]", 0), 0u);
  // The text once, then each further character's own marker.
  EXPECT_EQ(piece.size(), cjk.size() + 20000 * std::string("[UNK_BYTE_0xe4b8ad]").size());
}

TEST(HostileVocabTest, RandomBytesGiveValidIds) {
  const Tokenizer bpe = test::Build(MakeBpeVocab({"Ġt", "he"}, {"Ġ t", "h e"}, {"<c>"}, {"<u>"}));
  const Tokenizer spm = test::Build(MakeSpmVocab({{"▁", -3}, {"a", -4}, {"▁a", -1}}));
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 256);
    if (trial % 3 == 0) text += "<c><u>";
    for (const Tokenizer* tok : {&bpe, &spm}) {
      for (bool special : {false, true}) {
        auto ids = tok->Tokenize(text, special, special);
        ASSERT_TRUE(ids.ok());
        for (TokenId id : *ids) ASSERT_TRUE(tok->vocab().IsValid(id));
      }
    }
  }
}

std::vector<uint8_t> VocabGguf(void (*edit)(gguf::GgufWriter&)) {
  gguf::GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "▁", "a"};
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetF32Array("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1, -2});
  w.SetI32Array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 1});
  w.SetU32("tokenizer.ggml.bos_token_id", 1);
  w.SetU32("tokenizer.ggml.eos_token_id", 2);
  if (edit != nullptr) edit(w);
  return w.WriteBytes();
}

Result<Tokenizer> FromBytes(const std::vector<uint8_t>& bytes) {
  auto file = gguf::GgufFile::FromBytes(bytes);
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

TEST(HostileGgufTest, WellFormedFileLoads) {
  auto tok = FromBytes(VocabGguf(nullptr));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto ids = tok->Tokenize("a a", true, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{1, 3, 4, 3, 4}));
}

TEST(HostileGgufTest, BadKeysAreReported) {
  struct Case {
    void (*edit)(gguf::GgufWriter&);
    std::string_view needle;
  };
  const Case cases[] = {
      {[](gguf::GgufWriter& w) { w.SetI32Array("tokenizer.ggml.tokens", std::vector<int32_t>{1}); },
       "tokenizer.ggml.tokens"},
      {[](gguf::GgufWriter& w) { w.SetU32("tokenizer.ggml.model", 3); }, "tokenizer.ggml.model"},
      {[](gguf::GgufWriter& w) { w.SetString("tokenizer.ggml.scores", "x"); },
       "tokenizer.ggml.scores"},
      {[](gguf::GgufWriter& w) { w.SetF32Array("tokenizer.ggml.scores", std::vector<float>{0}); },
       "scores"},
      {[](gguf::GgufWriter& w) { w.SetU32("tokenizer.ggml.eos_token_id", 99); }, "eos_token_id"},
      {[](gguf::GgufWriter& w) { w.SetString("tokenizer.ggml.add_bos_token", "yes"); },
       "tokenizer.ggml.add_bos_token"},
      {[](gguf::GgufWriter& w) { w.SetString("tokenizer.ggml.model", "gpt2"); }, "merges"},
  };
  for (const Case& c : cases) {
    auto tok = FromBytes(VocabGguf(c.edit));
    ASSERT_FALSE(tok.ok()) << c.needle;
    EXPECT_NE(tok.status().message().find(c.needle), std::string::npos)
        << c.needle << " vs " << tok.status().ToString();
  }
}

TEST(HostileGgufTest, MissingKeysAreNotFound) {
  gguf::GgufWriter w;
  w.SetString("general.name", "no vocab");
  auto tok = FromBytes(w.WriteBytes());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace vlmd::engine::tokenizer
