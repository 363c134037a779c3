// Streaming detokenization: only complete UTF-8 characters come out, whatever the split of the
// byte stream into pieces; ill-formed bytes become U+FFFD; byte-fallback tokens reassemble.
#include <gtest/gtest.h>

#include "engine/gguf/gguf_reader.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8_stream.h"
#include "test_util.h"
#include "tokenizer_test_util.h"

namespace vlmd::engine::tokenizer {
namespace {

constexpr const char* kFffd = "\xEF\xBF\xBD";

TEST(Utf8StreamDecoderTest, HoldsBackSplitCharacters) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.Push("a\xC3"), "a");  // é = C3 A9, first half
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.Push("\xA9"), "é");
  // 🦙 = F0 9F A6 99 in three pieces.
  EXPECT_EQ(d.Push("\xF0"), "");
  EXPECT_EQ(d.Push("\x9F\xA6"), "");
  EXPECT_EQ(d.Push("\x99z"), "\xF0\x9F\xA6\x99z");
  EXPECT_EQ(d.Flush(), "");
}

TEST(Utf8StreamDecoderTest, EveryByteSplitGivesTheSameText) {
  const std::string text = "x\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x99 end";  // x é € 🦙
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Utf8StreamDecoder d;
    std::string out = d.Push(text.substr(0, cut));
    EXPECT_TRUE(IsValidUtf8(out)) << cut;
    out += d.Push(text.substr(cut));
    out += d.Flush();
    EXPECT_EQ(out, text) << "cut at " << cut;
  }
}

TEST(Utf8StreamDecoderTest, IllFormedBytesBecomeReplacementCharacters) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.Push("\xFF" "a"), std::string(kFffd) + "a");
  EXPECT_EQ(d.Push("\xC3("), std::string(kFffd) + "(");          // lead without continuation
  EXPECT_EQ(d.Push("\x80"), kFffd);                               // stray continuation
  EXPECT_EQ(d.Push("\xE0\x80"), std::string(kFffd) + kFffd);     // overlong: E0 needs A0..BF
  EXPECT_EQ(d.Push("\xED\xA0\x80"), std::string(kFffd) + kFffd + kFffd);  // surrogate
  EXPECT_EQ(d.Push("\xE2\x82"), "");                              // incomplete, held back
  EXPECT_EQ(d.Flush(), kFffd);                                    // ... and flushed as U+FFFD
  EXPECT_EQ(d.pending_bytes(), 0u);
}

TEST(TokenStreamDecoderTest, ByteFallbackTokensReassemble) {
  const Tokenizer tok = test::Build(test::MakeSpmVocab({{"▁", -3}, {"a", -4}}));
  auto ids = tok.Tokenize("a🦙a", false, false);
  ASSERT_TRUE(ids.ok());
  // ▁ a <0xF0> <0x9F> <0xA6> <0x99> a
  ASSERT_EQ(ids->size(), 7u);
  TokenStreamDecoder stream(tok);
  std::vector<std::string> outs;
  for (TokenId id : *ids) outs.push_back(stream.Push(id));
  EXPECT_EQ(outs, (std::vector<std::string>{" ", "a", "", "", "", "🦙", "a"}));
  EXPECT_EQ(stream.Flush(), "");
}

TEST(TokenStreamDecoderTest, ControlTokensHiddenUnlessSpecial) {
  const Tokenizer tok = test::Build(test::MakeBpeVocab({}, {}, {"<|im_end|>"}));
  TokenStreamDecoder hidden(tok, /*special=*/false);
  TokenStreamDecoder shown(tok, /*special=*/true);
  EXPECT_EQ(hidden.Push(256), "");
  EXPECT_EQ(shown.Push(256), "<|im_end|>");
}

// On the real vocabularies: streaming the upstream ids of every test string token by token gives
// valid UTF-8 at every step and, concatenated, exactly the concatenated pieces.
class StreamVectorsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamVectorsTest, StreamEqualsConcatenatedPieces) {
  const std::string base =
      testing::FixturePath(std::string("tokenizer/ggml-vocab-") + GetParam() + ".gguf");
  auto file = gguf::GgufFile::Open(base);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<uint8_t> inp = testing::ReadFileBytes(base + ".inp");
  const std::string all(inp.begin(), inp.end());
  size_t pos = 0;
  int n = 0;
  static const std::string kSep = "\n__ggml_vocab_test__\n";
  for (size_t hit; (hit = all.find(kSep, pos)) != std::string::npos; pos = hit + kSep.size()) {
    const std::string text = all.substr(pos, hit - pos);
    auto ids = tok->Tokenize(text, false, false);
    ASSERT_TRUE(ids.ok());
    TokenStreamDecoder stream(*tok);
    std::string streamed, pieces;
    for (TokenId id : *ids) {
      const std::string out = stream.Push(id);
      EXPECT_TRUE(IsValidUtf8(out));
      streamed += out;
      pieces += tok->TokenToPiece(id);
    }
    streamed += stream.Flush();
    EXPECT_EQ(streamed, pieces);
    // Byte-level BPE is lossless; SPM adds the leading space.
    const bool spm = tok->vocab().type() == VocabType::kSpm;
    EXPECT_EQ(pieces, (spm && !text.empty() ? " " : "") + text) << "case " << n;
    ++n;
  }
  EXPECT_EQ(n, 46);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamVectorsTest,
                         ::testing::Values("gpt-2", "starcoder", "llama-spm", "phi-3"));

}  // namespace
}  // namespace vlmd::engine::tokenizer
