// Reference matmuls: every weight type against its activation format must equal a double-precision
// dot of the dequantized weight row and the dequantized activation row, within f32 rounding of
// the block-scale arithmetic; plus the table wiring (act_type, convert_act) and sub-range writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/kernel_table.h"
#include "engine/kernels/ref/vec_dot_ref.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"
#include "kernels/packed_test_util.h"

namespace vlmd::engine::kernels {
namespace {

struct Case {
  DType weight;
  DType act;  // ggml's vec_dot_type
};

const Case kCases[] = {
    {DType::kF32, DType::kF32},   {DType::kF16, DType::kF16},   {DType::kBF16, DType::kBF16},
    {DType::kQ4_0, DType::kQ8_0}, {DType::kQ4_1, DType::kQ8_1}, {DType::kQ5_0, DType::kQ8_0},
    {DType::kQ8_0, DType::kQ8_0}, {DType::kQ4_K, DType::kQ8_K}, {DType::kQ5_K, DType::kQ8_K},
    {DType::kQ6_K, DType::kQ8_K},
    // Read-only formats (no quantizer: random blocks, packed_test::RandomBlocks).
    {DType::kQ5_1, DType::kQ8_1}, {DType::kIQ4_NL, DType::kQ8_0}, {DType::kQ2_K, DType::kQ8_K},
    {DType::kQ3_K, DType::kQ8_K}, {DType::kIQ4_XS, DType::kQ8_K},
};

std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(RefMatmulTest, TableMapsWeightTypesToGgmlActivationFormats) {
  const KernelTable& t = GetKernelTable(Isa::kRef);
  for (const Case& c : kCases) {
    const auto w = static_cast<size_t>(c.weight), a = static_cast<size_t>(c.act);
    EXPECT_NE(t.matmul[w], nullptr) << DTypeName(c.weight);
    EXPECT_EQ(t.act_type[w], c.act) << DTypeName(c.weight);
    EXPECT_NE(t.convert_act[a], nullptr) << DTypeName(c.act);
  }
  EXPECT_EQ(t.matmul[static_cast<size_t>(DType::kQ8_1)], nullptr);  // no kernel: load refused
}

// out[m, n] vs sum_k W[n, k] A[m, k] over dequantized rows in double. The reference computes
// exact integer block dots; what remains is f32 rounding of the scale products and of the
// accumulation (a few ulp per term, against sum |w a|), and for the plain types rounding of the
// f32 products. A relative bound of 1e-5 of sum |w a| (~170 f32 ulp) is far below what any
// wrong level, scale, lane or offset would produce.
void CheckShape(const Case& c, int64_t m_rows, int64_t n_rows, int64_t k) {
  const KernelTable& t = GetKernelTable(Isa::kRef);
  const MatmulFn matmul = t.matmul[static_cast<size_t>(c.weight)];
  const ConvertRowFn convert = t.convert_act[static_cast<size_t>(t.act_type[static_cast<size_t>(c.weight)])];
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(convert, nullptr);

  const auto w_f32 = Gaussian(n_rows * k, 11 + static_cast<uint32_t>(k));
  const auto a_f32 = Gaussian(m_rows * k, 23 + static_cast<uint32_t>(m_rows));
  const size_t w_row = *RowBytes(c.weight, k), a_row = *RowBytes(c.act, k);
  std::vector<uint8_t> w(n_rows * w_row), a(m_rows * a_row);
  if (FindQuantizeRowFn(c.weight) != nullptr) {
    ASSERT_TRUE(QuantizeTensor(c.weight, w_f32.data(), n_rows, k, w.data()).ok());
  } else {
    w = packed_test::RandomBlocks(c.weight, n_rows, k, 11 + static_cast<uint32_t>(k));
  }
  for (int64_t m = 0; m < m_rows; ++m) convert(a_f32.data() + m * k, a.data() + m * a_row, k);

  // What the kernel sees, as floats.
  std::vector<float> w_deq(n_rows * k), a_deq(m_rows * k);
  for (int64_t n = 0; n < n_rows; ++n) {
    ASSERT_TRUE(DequantizeRow(c.weight, w.data() + n * w_row, w_deq.data() + n * k, k).ok());
  }
  for (int64_t m = 0; m < m_rows; ++m) {
    ASSERT_TRUE(DequantizeRow(c.act, a.data() + m * a_row, a_deq.data() + m * k, k).ok());
  }

  const int64_t stride = n_rows + 2;  // padded rows: catch writes past n
  std::vector<float> out(m_rows * stride, std::numeric_limits<float>::quiet_NaN());
  MatmulArgs args;
  args.w = w.data();
  args.w_row_bytes = w_row;
  args.a = a.data();
  args.a_row_bytes = a_row;
  args.out = out.data();
  args.out_stride = stride;
  args.k = k;
  matmul(args, 0, m_rows, 0, n_rows);

  for (int64_t m = 0; m < m_rows; ++m) {
    for (int64_t n = 0; n < n_rows; ++n) {
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = double(w_deq[n * k + i]) * a_deq[m * k + i];
        exact += p;
        mag += std::fabs(p);
      }
      // Q4_1 x Q8_1 takes the offset term from s_y = f16(d_y,f32 * sum q_y), not from the f16 d_y
      // the dequantized row uses: allow |m_x| times that f16 rounding, per block.
      double s_slack = 0;
      if (c.act == DType::kQ8_1) {
        // Q4_1 and Q5_1 share the leading d, m of a block (the offset term's m).
        static_assert(offsetof(BlockQ4_1, m) == offsetof(BlockQ5_1, m));
        const uint8_t* x_row = w.data() + n * w_row;
        const size_t x_block = GetDTypeTraits(c.weight).block_bytes;
        const auto* yb = reinterpret_cast<const BlockQ8_1*>(a.data() + m * a_row);
        for (int64_t b = 0; b < k / 32; ++b) {
          int sum_q = 0;
          for (int j = 0; j < 32; ++j) sum_q += yb[b].qs[j];
          const double d = F16ToF32(yb[b].d);
          const double rel = 2.0 / 2048, abs_min = std::ldexp(2.0, -25);
          uint16_t m_x;
          std::memcpy(&m_x, x_row + b * x_block + offsetof(BlockQ4_1, m), sizeof(m_x));
          s_slack += std::fabs(F16ToF32(m_x)) *
                     (std::abs(sum_q) * std::max(d * rel, abs_min) +
                      std::max(std::fabs(d * sum_q) * rel, abs_min));
        }
      }
      ASSERT_NEAR(out[m * stride + n], exact, 1e-5 * mag + s_slack + 1e-30)
          << DTypeName(c.weight) << " m=" << m << " n=" << n << " k=" << k;
    }
    for (int64_t n = n_rows; n < stride; ++n) ASSERT_TRUE(std::isnan(out[m * stride + n]));
  }
}

TEST(RefMatmulTest, MatchesDequantizedDoubleDotOverOddShapes) {
  for (const Case& c : kCases) {
    const int64_t block = GetDTypeTraits(c.weight).quantized ? GetDTypeTraits(c.weight).block_size
                                                             : 32;
    const int64_t act_block = GetDTypeTraits(c.act).block_size;
    const int64_t unit = std::max(block, act_block);
    for (int64_t k : {unit, 5 * unit}) {
      for (int64_t m : {1, 3, 17}) {
        for (int64_t n : {1, 3, 17}) {
          SCOPED_TRACE(std::string(DTypeName(c.weight)) + " m=" + std::to_string(m) +
                       " n=" + std::to_string(n) + " k=" + std::to_string(k));
          CheckShape(c, m, n, k);
        }
      }
    }
  }
}

// A sub-range call writes exactly [m0, m1) x [n0, n1) and nothing else.
TEST(RefMatmulTest, WritesOnlyTheRequestedSubRange) {
  const KernelTable& t = GetKernelTable(Isa::kRef);
  const int64_t k = 256, m_rows = 5, n_rows = 7;
  const auto wf = Gaussian(n_rows * k, 3), af = Gaussian(m_rows * k, 4);
  std::vector<uint8_t> w(n_rows * *RowBytes(DType::kQ4_K, k)), a(m_rows * *RowBytes(DType::kQ8_K, k));
  ASSERT_TRUE(QuantizeTensor(DType::kQ4_K, wf.data(), n_rows, k, w.data()).ok());
  for (int64_t m = 0; m < m_rows; ++m) {
    t.convert_act[static_cast<size_t>(DType::kQ8_K)](af.data() + m * k,
                                                     a.data() + m * *RowBytes(DType::kQ8_K, k), k);
  }
  std::vector<float> full(m_rows * n_rows), part(m_rows * n_rows, -7.0f);
  MatmulArgs args{w.data(), *RowBytes(DType::kQ4_K, k), a.data(), *RowBytes(DType::kQ8_K, k),
                  full.data(), n_rows, k};
  const MatmulFn fn = t.matmul[static_cast<size_t>(DType::kQ4_K)];
  fn(args, 0, m_rows, 0, n_rows);
  args.out = part.data();
  fn(args, 1, 4, 2, 6);
  for (int64_t m = 0; m < m_rows; ++m) {
    for (int64_t n = 0; n < n_rows; ++n) {
      const bool inside = m >= 1 && m < 4 && n >= 2 && n < 6;
      EXPECT_EQ(part[m * n_rows + n], inside ? full[m * n_rows + n] : -7.0f) << m << " " << n;
    }
  }
}

// The integer block parts the SIMD kernels are compared against: a KBlockDot's lanes sum to
// sum_e scale(e) q_x(e) q_y(e), recomputed here from dequantized levels (d = 1, dmin = 0 trick:
// dequantizing with unit super-scales gives scale * level exactly).
TEST(RefMatmulTest, KBlockDotTotalsEqualScaledLevelDot) {
  const auto wf = Gaussian(256, 8), af = Gaussian(256, 9);
  BlockQ8_K y;
  quant::QuantizeRowQ8_K(af.data(), &y, 256);
  {
    BlockQ4_K x;
    quant::QuantizeRowQ4_K(wf.data(), &x, 256);
    BlockQ4_K unit = x;
    unit.d = F32ToF16(1.0f);
    unit.dmin = 0;
    float lv[256];
    quant::DequantizeRowQ4_K(&unit, lv, 256);
    int64_t expect = 0;
    for (int e = 0; e < 256; ++e) expect += static_cast<int64_t>(lv[e]) * y.qs[e];
    const ref::KBlockDot b = ref::BlockDotQ4_KQ8_K(x, y);
    EXPECT_EQ(b.Total(), expect);
    int64_t min_dot = 0;
    for (int e = 0; e < 256; ++e) {
      uint8_t sc, mn;
      quant::UnpackScaleMinK4(e / 32, x.scales, &sc, &mn);
      min_dot += static_cast<int64_t>(mn) * y.qs[e];
    }
    EXPECT_EQ(b.min_dot, min_dot);
  }
  {
    BlockQ6_K x;
    quant::QuantizeRowQ6_K(wf.data(), &x, 256);
    BlockQ6_K unit = x;
    unit.d = F32ToF16(1.0f);
    float lv[256];
    quant::DequantizeRowQ6_K(&unit, lv, 256);
    int64_t expect = 0;
    for (int e = 0; e < 256; ++e) expect += static_cast<int64_t>(lv[e]) * y.qs[e];
    EXPECT_EQ(ref::BlockDotQ6_KQ8_K(x, y).Total(), expect);
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels
