// Prompt token ids of the tiny-llava / tiny-smolvlm goldens (llama.cpp mtmd_tokenize): every text
// chunk, tokenized with add_special = true and parse_special = true, must give the golden ids.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/tokenizer/tokenizer.h"
#include "test_util.h"

namespace vlmd::engine::tokenizer {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  const std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  return nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
}

Tokenizer LoadTokenizer(const std::string& fixture) {
  auto file = gguf::GgufFile::Open(testing::FixturePath(fixture + "/text.gguf"));
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  auto tok = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

class FixturePromptsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FixturePromptsTest, TextChunksMatchGoldenIds) {
  const std::string fixture = GetParam();
  const nlohmann::json golden = ReadJson(testing::FixturePath(fixture + "/golden.json"));
  ASSERT_TRUE(golden.is_object());
  const Tokenizer tok = LoadTokenizer(fixture);
  int n_chunks = 0;
  for (const auto& c : golden["cases"]) {
    for (const auto& chunk : c["chunks"]) {
      if (chunk["type"] != "text") continue;
      const std::string text = chunk["text"];
      const std::vector<TokenId> expected = chunk["tokens"].get<std::vector<TokenId>>();
      auto ids = tok.Tokenize(text, /*add_special=*/true, /*parse_special=*/true);
      ASSERT_TRUE(ids.ok()) << ids.status().ToString();
      EXPECT_EQ(*ids, expected) << c["name"] << " chunk " << chunk["index"] << ": " << text;
      ++n_chunks;
    }
  }
  EXPECT_GE(n_chunks, 3);
}

// The prompt split at each <__media__> marker, each piece tokenized separately (what mtmd does
// before it inserts the image wrappers): the pieces are prefixes/suffixes of the golden chunks.
TEST_P(FixturePromptsTest, PromptPiecesAreConsistentWithChunks) {
  const std::string fixture = GetParam();
  const nlohmann::json golden = ReadJson(testing::FixturePath(fixture + "/golden.json"));
  ASSERT_TRUE(golden.is_object());
  const Tokenizer tok = LoadTokenizer(fixture);
  for (const auto& c : golden["cases"]) {
    const std::string prompt = c["prompt"];
    const size_t marker = prompt.find("<__media__>");
    std::vector<TokenId> first_chunk = c["chunks"][0]["tokens"].get<std::vector<TokenId>>();
    std::vector<TokenId> last_chunk = c["chunks"].back()["tokens"].get<std::vector<TokenId>>();
    auto head = tok.Tokenize(prompt.substr(0, marker), true, true);
    ASSERT_TRUE(head.ok());
    ASSERT_LE(head->size(), first_chunk.size());
    EXPECT_TRUE(std::equal(head->begin(), head->end(), first_chunk.begin())) << c["name"];
    if (marker == std::string::npos) continue;
    auto tail = tok.Tokenize(prompt.substr(marker + 11), true, true);
    ASSERT_TRUE(tail.ok());
    ASSERT_LE(tail->size(), last_chunk.size());
    EXPECT_TRUE(std::equal(tail->rbegin(), tail->rend(), last_chunk.rbegin())) << c["name"];
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixturePromptsTest,
                         ::testing::Values("tiny-llava", "tiny-smolvlm"));

TEST(FixtureVocabTest, SmolVlmSpecialIdsAndEog) {
  const Tokenizer tok = LoadTokenizer("tiny-smolvlm");
  EXPECT_EQ(tok.eos(), 49279);
  EXPECT_TRUE(tok.IsEog(49279));  // <end_of_utterance>
  EXPECT_TRUE(tok.IsEog(2));      // <|im_end|>, by its text
  EXPECT_FALSE(tok.IsEog(1));     // <|im_start|>
  EXPECT_TRUE(tok.IsEog(4));      // <fim_pad>: fill-in-the-middle controls end it, as llama.cpp
  EXPECT_FALSE(tok.vocab().add_bos());
  // parse_special off: control tokens are plain text.
  auto ids = tok.Tokenize("<|im_start|>", false, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(ids->size(), 1u);
  EXPECT_EQ(tok.Detokenize(*ids, false, false), "<|im_start|>");
}

}  // namespace
}  // namespace vlmd::engine::tokenizer
