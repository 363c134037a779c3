// vlmd-quantize's engine against llama-quantize: the fixtures' quantized files were written by
// `llama-quantize --pure` from text.gguf, so re-quantizing text.gguf must give the same types and
// the same bytes for every tensor.
#include "engine/gguf/quantize_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "engine/gguf/gguf_reader.h"
#include "test_util.h"

namespace vlmd::engine::gguf {
namespace {

struct Case {
  const char* fixture;
  const char* quantized_file;
  DType type;
};

class QuantizeModelFixtureTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeModelFixtureTest, MatchesLlamaQuantizeByteForByte) {
  const Case c = GetParam();
  const std::string base = vlmd::testing::FixturePath(std::string(c.fixture) + "/text.gguf");
  const std::string golden =
      vlmd::testing::FixturePath(std::string(c.fixture) + "/" + c.quantized_file);
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("vlmd-qm-" + std::to_string(::getpid()) + "-" + c.quantized_file))
                              .string();
  ThreadPool pool(2);
  auto report = QuantizeModel(base, out, c.type, &pool);
  ASSERT_TRUE(report.ok()) << report.status().ToString();

  auto ours = GgufFile::Open(out);
  auto ref = GgufFile::Open(golden);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  ASSERT_EQ((*ours)->tensors().size(), (*ref)->tensors().size());
  for (const TensorInfo& r : (*ref)->tensors()) {
    const TensorInfo* o = (*ours)->FindTensor(r.name);
    ASSERT_NE(o, nullptr) << r.name;
    EXPECT_EQ(o->type, r.type) << r.name;
    ASSERT_EQ(o->nbytes, r.nbytes) << r.name;
    EXPECT_EQ(std::memcmp(o->data, r.data, r.nbytes), 0) << r.name << " bytes differ";
  }
  auto ft = (*ours)->GetU32("general.file_type");
  ASSERT_TRUE(ft.ok());
  for (const auto& t : report->tensors) {
    if (!t.quantized) continue;
    EXPECT_GT(t.rel_error, 0.0) << t.name;
    EXPECT_LT(t.rel_error, 0.1) << t.name;
  }
  std::filesystem::remove(out);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, QuantizeModelFixtureTest,
    ::testing::Values(Case{"tiny-llava", "text-q8_0.gguf", DType::kQ8_0},
                      Case{"tiny-llava", "text-q4_0.gguf", DType::kQ4_0},
                      Case{"tiny-llava", "text-q4_k.gguf", DType::kQ4_K},
                      Case{"tiny-smolvlm", "text-q8_0.gguf", DType::kQ8_0},
                      Case{"tiny-smolvlm", "text-q4_0.gguf", DType::kQ4_0},
                      Case{"tiny-smolvlm", "text-q4_k.gguf", DType::kQ4_K}));

TEST(QuantizeModelTest, RejectsMissingInputAndBadType) {
  ThreadPool pool(1);
  auto missing = QuantizeModel("/nonexistent/model.gguf", "/tmp/x.gguf", DType::kQ8_0, &pool);
  EXPECT_FALSE(missing.ok());
  auto bad_type = QuantizeModel(vlmd::testing::FixturePath("tiny-llava/text.gguf"), "/tmp/x.gguf",
                                DType::kQ2_K, &pool);
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.status().code(), StatusCode::kInvalidArgument);
}

TEST(QuantizeModelTest, KeepsNormsAndEmbeddingsExact) {
  EXPECT_TRUE(IsQuantizableWeight("blk.0.attn_q.weight", 2));
  EXPECT_TRUE(IsQuantizableWeight("token_embd.weight", 2));
  EXPECT_FALSE(IsQuantizableWeight("blk.0.attn_norm.weight", 1));
  EXPECT_FALSE(IsQuantizableWeight("v.position_embd.weight", 2));
  EXPECT_FALSE(IsQuantizableWeight("v.patch_embd.weight", 4));
  EXPECT_FALSE(IsQuantizableWeight("v.blk.0.attn_q.bias", 1));
}

}  // namespace
}  // namespace vlmd::engine::gguf
