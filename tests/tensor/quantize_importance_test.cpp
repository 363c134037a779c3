// Quantization weighted by an importance matrix (issue 24): Q4_K and Q5_K equal the bytes
// llama.cpp writes with an imatrix (tests/data/quant/README.md), and the importance does what it
// is for: the error on the columns it marks shrinks against round-to-nearest.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/tensor/quantize.h"
#include "test_util.h"

namespace vlmd::engine {
namespace {

// The generator of tests/data/quant/README.md's inputs (kept in step with the driver that wrote
// the golden file).
struct Lcg {
  uint32_t s;
  float Next() {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(s >> 8) * (1.0f / 16777216.0f);
  }
};

TEST(QuantizeImportance, Q4KAndQ5KEqualLlamaCppsImatrixBytes) {
  constexpr int kRows = 6, kN = 512;
  std::vector<float> x(kRows * kN), imp(kN);
  Lcg g{12345};
  for (int r = 0; r < kRows; ++r) {
    const float scale = r == 0 ? 0.01f : (r == 5 ? 30.0f : 1.0f);
    for (int i = 0; i < kN; ++i) x[r * kN + i] = (2 * g.Next() - 1) * scale + (r == 4 ? 0.5f : 0.0f);
  }
  for (int i = 0; i < kN; ++i) {
    const float u = g.Next();
    imp[i] = i % 37 == 0 ? 0.0f : 0.01f + 100 * u * u * u;
  }
  const std::vector<uint8_t> golden =
      testing::ReadFileBytes(testing::SourcePath("tests/data/quant/imatrix_q4_k_q5_k.bin"));
  const size_t q4_row = kN / 256 * sizeof(BlockQ4_K), q5_row = kN / 256 * sizeof(BlockQ5_K);
  ASSERT_EQ(golden.size(), kRows * (q4_row + q5_row));
  for (int r = 0; r < kRows; ++r) {
    std::vector<uint8_t> q4(q4_row), q5(q5_row);
    quant::QuantizeRowQ4_K(x.data() + r * kN, reinterpret_cast<BlockQ4_K*>(q4.data()), kN, imp.data());
    quant::QuantizeRowQ5_K(x.data() + r * kN, reinterpret_cast<BlockQ5_K*>(q5.data()), kN, imp.data());
    EXPECT_EQ(q4, std::vector<uint8_t>(golden.begin() + r * q4_row, golden.begin() + (r + 1) * q4_row))
        << "Q4_K row " << r;
    const size_t q5_at = kRows * q4_row + r * q5_row;
    EXPECT_EQ(q5, std::vector<uint8_t>(golden.begin() + q5_at, golden.begin() + q5_at + q5_row))
        << "Q5_K row " << r;
  }
}

// sum over columns of importance * (x - dequantized x)^2.
template <typename Block>
double WeightedError(const std::vector<float>& x, const std::vector<Block>& q, const std::vector<float>& imp,
                     DType type) {
  std::vector<float> back(x.size());
  EXPECT_TRUE(DequantizeRow(type, q.data(), back.data(), static_cast<int64_t>(x.size())).ok());
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += imp[i] * (x[i] - back[i]) * (x[i] - back[i]);
  return e;
}

TEST(QuantizeImportance, TheMarkedColumnsLoseLessThanWithRoundToNearest) {
  // A few columns carry large activations (as trained LLMs have): their weights' error costs
  // the most, and an imatrix says so.
  constexpr int kN = 1024;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> imp(kN, 1.0f);
  for (int i = 0; i < kN; i += 29) imp[i] = 400.0f;
  double with4 = 0, without4 = 0, with5 = 0, without5 = 0;
  int rows_better = 0;
  for (int row = 0; row < 40; ++row) {
    std::vector<float> x(kN);
    for (float& v : x) v = nd(rng);
    std::vector<BlockQ4_K> a(kN / 256), b(kN / 256);
    quant::QuantizeRowQ4_K(x.data(), a.data(), kN, imp.data());
    quant::QuantizeRowQ4_K(x.data(), b.data(), kN);
    const double w = WeightedError(x, a, imp, DType::kQ4_K), wo = WeightedError(x, b, imp, DType::kQ4_K);
    with4 += w;
    without4 += wo;
    rows_better += w < wo;
    std::vector<BlockQ5_K> c(kN / 256), d(kN / 256);
    quant::QuantizeRowQ5_K(x.data(), c.data(), kN, imp.data());
    quant::QuantizeRowQ5_K(x.data(), d.data(), kN);
    with5 += WeightedError(x, c, imp, DType::kQ5_K);
    without5 += WeightedError(x, d, imp, DType::kQ5_K);
  }
  EXPECT_LT(with4, 0.7 * without4);
  EXPECT_LT(with5, 0.7 * without5);
  EXPECT_GE(rows_better, 36);
  // Without importance the functions are the reference quantizers (llama-quantize without
  // --imatrix), which quantize_test checks against ggml's bytes.
  std::vector<float> x(256, 0.25f);
  x[3] = -1.0f;
  std::vector<BlockQ4_K> p(1), q(1);
  quant::QuantizeRowQ4_K(x.data(), p.data(), 256, nullptr);
  quant::QuantizeRowQ4_K(x.data(), q.data(), 256);
  EXPECT_EQ(std::memcmp(p.data(), q.data(), sizeof(BlockQ4_K)), 0);
}

}  // namespace
}  // namespace vlmd::engine
