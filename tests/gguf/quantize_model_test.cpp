// vlmd-quantize's engine against llama-quantize: the fixtures' quantized files were written by
// `llama-quantize --pure` from text.gguf, so re-quantizing text.gguf must give the same types and
// the same bytes for every tensor.
#include "engine/gguf/quantize_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "engine/gguf/gguf_reader.h"
#include "engine/tensor/quantize.h"
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
  auto report = QuantizeModel(base, out, {.type = c.type}, &pool);
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
  auto missing = QuantizeModel("/nonexistent/model.gguf", "/tmp/x.gguf", {.type = DType::kQ8_0}, &pool);
  EXPECT_FALSE(missing.ok());
  auto bad_type = QuantizeModel(vlmd::testing::FixturePath("tiny-llava/text.gguf"), "/tmp/x.gguf",
                                {.type = DType::kQ2_K}, &pool);
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.status().code(), StatusCode::kInvalidArgument);
}

// With an importance matrix: the matrices it has an entry for are quantized weighted by it (the
// bytes QuantizeRowWeighted makes, which tests/tensor checks against llama.cpp's), the others
// as without; an entry that does not fit its matrix is refused.
TEST(QuantizeModelTest, AnImportanceMatrixWeighsTheMatricesItCovers) {
  const std::string base = vlmd::testing::FixturePath("tiny-smolvlm/text.gguf");
  auto in = GgufFile::Open(base);
  ASSERT_TRUE(in.ok());
  const TensorInfo* q = (*in)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  const int64_t k = q->ne[0];
  ImportanceMatrix m;
  ImatrixEntry e;
  e.n_cols = k;
  e.counts = {4};
  for (int64_t i = 0; i < k; ++i) e.sum_sq.push_back(i % 7 == 0 ? 400.0f : 4.0f);
  m.entries["blk.0.attn_q.weight"] = e;
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string out = dir + "/vlmd-qm-imatrix-" + std::to_string(::getpid()) + ".gguf";
  const std::string plain = dir + "/vlmd-qm-plain-" + std::to_string(::getpid()) + ".gguf";
  ThreadPool pool(2);
  // Q4_0: the fixture's rows (64 columns) are too short for the k-quants' 256-value blocks.
  auto report = QuantizeModel(base, out, {.type = DType::kQ4_0, .imatrix = &m}, &pool);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(QuantizeModel(base, plain, {.type = DType::kQ4_0}, &pool).ok());
  int weighted = 0;
  for (const auto& t : report->tensors) {
    weighted += t.weighted;
    EXPECT_EQ(t.weighted, t.name == "blk.0.attn_q.weight") << t.name;
  }
  EXPECT_EQ(weighted, 1);
  auto ours = GgufFile::Open(out);
  auto ref = GgufFile::Open(plain);
  ASSERT_TRUE(ours.ok() && ref.ok());
  const std::vector<float> imp = m.Importance("blk.0.attn_q.weight");
  const TensorInfo* oq = (*ours)->FindTensor("blk.0.attn_q.weight");
  ASSERT_EQ(oq->type, DType::kQ4_0);
  const uint64_t row_bytes = *RowBytes(DType::kQ4_0, k);
  std::vector<float> row(static_cast<size_t>(k));
  std::vector<uint8_t> want(row_bytes);
  for (int64_t r = 0; r < q->ne[1]; ++r) {
    ASSERT_TRUE(DequantizeRow(q->type, q->data + r * *RowBytes(q->type, k), row.data(), k).ok());
    ASSERT_TRUE(QuantizeRowWeighted(DType::kQ4_0, row.data(), want.data(), k, imp.data()).ok());
    ASSERT_EQ(std::memcmp(oq->data + r * row_bytes, want.data(), row_bytes), 0) << "row " << r;
  }
  EXPECT_NE(std::memcmp(oq->data, (*ref)->FindTensor("blk.0.attn_q.weight")->data, oq->nbytes), 0);
  for (const char* other : {"blk.0.attn_k.weight", "blk.0.ffn_down.weight"}) {
    const TensorInfo* a = (*ours)->FindTensor(other);
    const TensorInfo* b = (*ref)->FindTensor(other);
    ASSERT_TRUE(a != nullptr && b != nullptr) << other;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << other;
  }
  // Another model's imatrix: its entry has the wrong number of columns.
  m.entries["blk.0.attn_q.weight"].n_cols = k / 2;
  m.entries["blk.0.attn_q.weight"].sum_sq.resize(static_cast<size_t>(k / 2));
  auto wrong = QuantizeModel(base, out, {.type = DType::kQ4_0, .imatrix = &m}, &pool);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("another model"), std::string::npos) << wrong.status().ToString();
  std::filesystem::remove(out);
  std::filesystem::remove(plain);
}

TEST(QuantizeModelTest, TensorTypeOverridesPickTheFirstMatchingPattern) {
  const std::string base = vlmd::testing::FixturePath("tiny-smolvlm/text.gguf");
  const std::string out = std::filesystem::temp_directory_path().string() + "/vlmd-qm-override-" +
                          std::to_string(::getpid()) + ".gguf";
  QuantizeOptions opts{.type = DType::kQ4_0};
  for (const char* text : {"attn_v=q8_0", "blk\\.0\\..*ffn=f16", "ffn_up=q5_0"}) {
    auto o = ParseTensorTypeOverride(text);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    opts.overrides.push_back(*o);
  }
  ThreadPool pool(2);
  auto report = QuantizeModel(base, out, opts, &pool);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok());
  const auto type_of = [&](const char* name) { return (*file)->FindTensor(name)->type; };
  EXPECT_EQ(type_of("blk.0.attn_v.weight"), DType::kQ8_0);
  EXPECT_EQ(type_of("blk.1.attn_v.weight"), DType::kQ8_0);
  EXPECT_EQ(type_of("blk.0.ffn_up.weight"), DType::kF16);  // the second pattern comes first
  EXPECT_EQ(type_of("blk.1.ffn_up.weight"), DType::kQ5_0);
  EXPECT_EQ(type_of("blk.1.ffn_down.weight"), DType::kQ4_0);
  EXPECT_EQ(type_of("blk.0.attn_q.weight"), DType::kQ4_0);
  EXPECT_EQ(type_of("blk.0.attn_norm.weight"), DType::kF32);  // not a weight matrix
  std::filesystem::remove(out);

  for (const char* bad : {"attn_v", "=q8_0", "attn_v=", "attn_v=q2_k", "attn_v=nope", "(=q8_0"}) {
    auto o = ParseTensorTypeOverride(bad);
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << bad;
  }
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
