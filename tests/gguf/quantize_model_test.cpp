// vlmd-quantize's engine against llama-quantize: the fixtures' quantized files were written by
// `llama-quantize --pure` from text.gguf, so re-quantizing text.gguf must give the same types and
// the same bytes for every tensor.
#include "engine/gguf/quantize_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include <unistd.h>

#include "engine/gguf/awq_scales.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
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

// AWQ folds only where the model's structure makes it exact; everything else is refused by name.
TEST(AwqScalesTest, RefusesModelsWhereTheFoldWouldNotBeExact) {
  struct Shape {
    std::string arch = "llama";
    bool gate = true;
    bool norm_bias = false;
    int64_t up_rows = 8;  // ffn_down takes 8
  };
  const auto search = [](const Shape& shape) {
    GgufWriter w;
    w.SetString("general.architecture", shape.arch);
    std::vector<std::vector<float>> data;
    const auto add = [&](const std::string& name, std::vector<int64_t> ne) {
      int64_t n = 1;
      for (int64_t d : ne) n *= d;
      auto& v = data.emplace_back(static_cast<size_t>(n), 0.5f);
      ASSERT_TRUE(w.AddTensor(name, DType::kF32, ne,
                              {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4}).ok());
    };
    add("blk.0.attn_norm.weight", {4});
    if (shape.norm_bias) add("blk.0.attn_norm.bias", {4});
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) add(std::string("blk.0.") + m + ".weight", {4, 4});
    add("blk.0.ffn_norm.weight", {4});
    if (shape.gate) add("blk.0.ffn_gate.weight", {4, 8});
    add("blk.0.ffn_up.weight", {4, shape.up_rows});
    add("blk.0.ffn_down.weight", {8, 4});
    ImportanceMatrix stats;
    for (const char* m : {"attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"}) {
      stats.entries[std::string("blk.0.") + m + ".weight"] = {4, {1, 9, 1, 1}, {1}};
    }
    stats.entries["blk.0.ffn_down.weight"] = {8, {1, 1, 1, 1, 9, 1, 1, 1}, {1}};
    auto file = GgufFile::FromBytes(w.WriteBytes());
    EXPECT_TRUE(file.ok());
    return SearchAwqScales(**file, stats, {}, nullptr, 0.5f);
  };
  auto ok = search({});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 3u);
  const auto refused = [&](const Shape& shape, const char* why) {
    auto r = search(shape);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
  };
  refused({.arch = "gpt2"}, "architecture 'gpt2'");
  refused({.gate = false}, "no ffn_norm or no ffn_gate");
  refused({.norm_bias = true}, "attn_norm.bias' exists");
  refused({.up_rows = 16}, "does not have the 8 outputs");
}

// A weight matrix holding an inf cannot be quantized: vlmd-quantize stops with the tensor and row
// named and writes no output.
TEST(QuantizeModelTest, RefusesAMatrixWithAnInfNamingTensorAndRow) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/vlmd-qm-inf-" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  std::vector<float> up(64 * 3, 0.5f);
  up[2 * 64 + 9] = std::numeric_limits<float>::infinity();
  const std::vector<int64_t> ne{64, 3};
  ASSERT_TRUE(w.AddTensor("blk.0.ffn_up.weight", DType::kF32, ne,
                          {reinterpret_cast<const uint8_t*>(up.data()), up.size() * 4})
                  .ok());
  ASSERT_TRUE(w.WriteFile(dir + "/in.gguf").ok());
  ThreadPool pool(1);
  auto report = QuantizeModel(dir + "/in.gguf", dir + "/out.gguf", {.type = DType::kQ8_0}, &pool);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = report.status().message();
  EXPECT_NE(m.find("blk.0.ffn_up.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("row 2"), std::string::npos) << m;
  EXPECT_NE(m.find("inf"), std::string::npos) << m;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.gguf"));
  std::filesystem::remove_all(dir);
}

TEST(QuantizeModelTest, KeepsNormsAndEmbeddingsExact) {
  EXPECT_TRUE(IsQuantizableWeight("blk.0.attn_q.weight", 2));
  EXPECT_TRUE(IsQuantizableWeight("token_embd.weight", 2));
  EXPECT_FALSE(IsQuantizableWeight("blk.0.attn_norm.weight", 1));
  EXPECT_FALSE(IsQuantizableWeight("v.position_embd.weight", 2));
  EXPECT_FALSE(IsQuantizableWeight("v.patch_embd.weight", 4));
  EXPECT_FALSE(IsQuantizableWeight("v.blk.0.attn_q.bias", 1));
  EXPECT_TRUE(IsQuantizableWeight("blk.0.ffn_up_exps.weight", 3));
  EXPECT_FALSE(IsQuantizableWeight("blk.0.ffn_gate_inp.weight", 2));
}

// A mixture of experts' stacked matrices [k, n, n_expert] are quantized row by row across the
// experts, each expert's rows weighed by its own part of a per-expert imatrix entry (llama.cpp's
// layout: n_mat = n_expert); the router stays F32.
TEST(QuantizeModelTest, ExpertStacksAreQuantizedPerExpertAndTheRouterKept) {
  constexpr int64_t k = 64, n = 8, experts = 3;
  std::vector<float> w(static_cast<size_t>(k * n * experts)), router(static_cast<size_t>(k * experts));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 5));
  for (size_t i = 0; i < router.size(); ++i) router[i] = std::cos(0.11f * static_cast<float>(i));
  GgufWriter gw;
  gw.SetString("general.architecture", "qwen3moe");
  const int64_t ne_w[] = {k, n, experts}, ne_r[] = {k, experts};
  const auto bytes = [](const std::vector<float>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
  };
  ASSERT_TRUE(gw.AddTensor("blk.0.ffn_up_exps.weight", DType::kF32, ne_w, bytes(w)).ok());
  ASSERT_TRUE(gw.AddTensor("blk.0.ffn_gate_inp.weight", DType::kF32, ne_r, bytes(router)).ok());
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string in = dir + "/vlmd-qm-moe-in-" + std::to_string(::getpid()) + ".gguf";
  const std::string out = dir + "/vlmd-qm-moe-out-" + std::to_string(::getpid()) + ".gguf";
  ASSERT_TRUE(gw.WriteFile(in).ok());
  ImportanceMatrix m;
  ImatrixEntry e;
  e.n_cols = k;
  e.counts = {2, 2, 2};
  for (int64_t x = 0; x < experts; ++x) {
    for (int64_t i = 0; i < k; ++i) e.sum_sq.push_back((i + x) % 5 == 0 ? 300.0f : 2.0f);
  }
  m.entries["blk.0.ffn_up_exps.weight"] = e;
  ThreadPool pool(2);
  auto report = QuantizeModel(in, out, {.type = DType::kQ4_0, .imatrix = &m}, &pool);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto q = GgufFile::Open(out);
  ASSERT_TRUE(q.ok());
  const TensorInfo* r = (*q)->FindTensor("blk.0.ffn_gate_inp.weight");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, DType::kF32);
  const TensorInfo* t = (*q)->FindTensor("blk.0.ffn_up_exps.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, DType::kQ4_0);
  ASSERT_EQ(t->n_dims, 3);
  EXPECT_EQ(t->ne[2], experts);
  const std::vector<float> imp = m.Importance("blk.0.ffn_up_exps.weight");
  ASSERT_EQ(imp.size(), static_cast<size_t>(k * experts));
  const uint64_t rb = *RowBytes(DType::kQ4_0, k);
  std::vector<uint8_t> want(rb), other(rb);
  int differs = 0;
  for (int64_t row = 0; row < n * experts; ++row) {
    const float* src = w.data() + row * k;
    const int64_t x = row / n;
    ASSERT_TRUE(QuantizeRowWeighted(DType::kQ4_0, src, want.data(), k, imp.data() + x * k).ok());
    ASSERT_EQ(std::memcmp(t->data + row * rb, want.data(), rb), 0) << "row " << row;
    // Another expert's importance gives other bytes for some rows: the slice matters.
    ASSERT_TRUE(QuantizeRowWeighted(DType::kQ4_0, src, other.data(), k, imp.data() + ((x + 1) % experts) * k).ok());
    differs += std::memcmp(other.data(), want.data(), rb) != 0;
  }
  EXPECT_GT(differs, 0);
  // An entry of one matrix's columns for the stacked experts is refused, as llama-quantize
  // refuses it (another model's imatrix).
  m.entries["blk.0.ffn_up_exps.weight"].sum_sq.resize(static_cast<size_t>(k));
  m.entries["blk.0.ffn_up_exps.weight"].counts = {2};
  auto dense = QuantizeModel(in, out, {.type = DType::kQ4_0, .imatrix = &m}, &pool);
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.status().message().find("3 experts"), std::string::npos) << dense.status().ToString();
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace vlmd::engine::gguf
