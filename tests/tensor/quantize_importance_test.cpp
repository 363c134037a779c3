// Quantization weighted by an importance matrix (issue 24): Q4_K, Q5_K, Q6_K and Q4_0 equal the bytes
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

TEST(QuantizeImportance, EveryTypeEqualsLlamaCppsImatrixBytes) {
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
  // The golden file holds the 6 rows in each type, one type after the other.
  const std::vector<uint8_t> golden =
      testing::ReadFileBytes(testing::SourcePath("tests/data/quant/imatrix_goldens.bin"));
  size_t at = 0;
  auto check = [&](const char* type_name, size_t row_bytes, auto quantize) {
    for (int r = 0; r < kRows; ++r, at += row_bytes) {
      std::vector<uint8_t> q(row_bytes);
      quantize(x.data() + r * kN, q.data());
      ASSERT_LE(at + row_bytes, golden.size());
      EXPECT_EQ(q, std::vector<uint8_t>(golden.begin() + at, golden.begin() + at + row_bytes))
          << type_name << " row " << r;
    }
  };
  check("Q4_K", kN / 256 * sizeof(BlockQ4_K), [&](const float* row, uint8_t* out) {
    quant::QuantizeRowQ4_K(row, reinterpret_cast<BlockQ4_K*>(out), kN, imp.data());
  });
  check("Q5_K", kN / 256 * sizeof(BlockQ5_K), [&](const float* row, uint8_t* out) {
    quant::QuantizeRowQ5_K(row, reinterpret_cast<BlockQ5_K*>(out), kN, imp.data());
  });
  check("Q6_K", kN / 256 * sizeof(BlockQ6_K), [&](const float* row, uint8_t* out) {
    quant::QuantizeRowQ6_K(row, reinterpret_cast<BlockQ6_K*>(out), kN, imp.data());
  });
  check("Q4_0", kN / 32 * sizeof(BlockQ4_0), [&](const float* row, uint8_t* out) {
    quant::QuantizeRowQ4_0(row, reinterpret_cast<BlockQ4_0*>(out), kN, imp.data());
  });
  EXPECT_EQ(at, golden.size());
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
  double with4 = 0, without4 = 0, with5 = 0, without5 = 0, with6 = 0, without6 = 0, with40 = 0, without40 = 0;
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
    std::vector<BlockQ6_K> e(kN / 256), f(kN / 256);
    quant::QuantizeRowQ6_K(x.data(), e.data(), kN, imp.data());
    quant::QuantizeRowQ6_K(x.data(), f.data(), kN);
    with6 += WeightedError(x, e, imp, DType::kQ6_K);
    without6 += WeightedError(x, f, imp, DType::kQ6_K);
    std::vector<BlockQ4_0> g(kN / 32), h(kN / 32);
    quant::QuantizeRowQ4_0(x.data(), g.data(), kN, imp.data());
    quant::QuantizeRowQ4_0(x.data(), h.data(), kN);
    with40 += WeightedError(x, g, imp, DType::kQ4_0);
    without40 += WeightedError(x, h, imp, DType::kQ4_0);
  }
  EXPECT_LT(with4, 0.7 * without4);
  EXPECT_LT(with5, 0.7 * without5);
  EXPECT_LT(with6, 0.7 * without6);
  EXPECT_LT(with40, 0.7 * without40);
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
