// Tokenizer parity with llama.cpp's test-tokenizer-0 vectors (tests/fixtures/tokenizer): every
// case of every vocabulary must give exactly the upstream (Hugging Face) token ids.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/tokenizer/tokenizer.h"
#include "test_util.h"

namespace vlmd::engine::tokenizer {
namespace {

std::string ReadText(const std::string& path) {
  const std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  return std::string(bytes.begin(), bytes.end());
}

// .inp: tests separated (and terminated) by "\n__ggml_vocab_test__\n".
std::vector<std::string> ParseInputs(const std::string& text) {
  static const std::string kSep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> tests;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(kSep, pos)) != std::string::npos; pos = hit + kSep.size()) {
    tests.push_back(text.substr(pos, hit - pos));
  }
  return tests;
}

// .out: one line of space-separated ids per test.
std::vector<std::vector<TokenId>> ParseOutputs(const std::string& text) {
  std::vector<std::vector<TokenId>> outs;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<TokenId> row;
    for (TokenId id; ids >> id;) row.push_back(id);
    outs.push_back(row);
  }
  return outs;
}

class VocabVectorsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectorsTest, MatchesEveryCase) {
  const std::string base = testing::FixturePath(std::string("tokenizer/ggml-vocab-") + GetParam() +
                                                ".gguf");
  auto file = gguf::GgufFile::Open(base);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();

  const std::vector<std::string> inputs = ParseInputs(ReadText(base + ".inp"));
  const std::vector<std::vector<TokenId>> expected = ParseOutputs(ReadText(base + ".out"));
  ASSERT_EQ(inputs.size(), 46u);  // the upstream vector count: a parsing slip shows here
  ASSERT_EQ(inputs.size(), expected.size());
  int passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto ids = tok->Tokenize(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, expected[i]) << "case " << i << ": '" << inputs[i] << "'";
    passed += *ids == expected[i];
  }
  EXPECT_EQ(passed, static_cast<int>(inputs.size()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VocabVectorsTest,
                         ::testing::Values("gpt-2", "starcoder", "llama-spm", "phi-3"));

}  // namespace
}  // namespace vlmd::engine::tokenizer
