// Matmul kernels of every ISA this CPU runs x every weight type, through ops::MatMul, against
// (1) a double-precision dot of the dequantized weights and the dequantized converted activations
// and (2) the kRef table; plus byte-exactness of every ISA's activation converters against the
// reference activation quantizers (engine/tensor/quantize.h).
//
// Tolerance (derived, not tuned): the integer block dots are exact and the f16/f32 scales and
// dequantized values are exact products or one rounding each, so what remains is f32 rounding of
// at most k products/scalings and k additions in some order. Any order of summing k terms has
// |error| <= gamma_k * sum|terms| with gamma_k ~= k u (u = 2^-24); the scale products and the
// dequantization add <= 3 more roundings per term. Bound used: (k + 32) * 4u * sum_k |w_k a_k|
// against the double reference, twice that between two f32 kernels.
#include "engine/ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/kernels/packed_int8.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine {
namespace {

using kernels::Isa;
using kernels::KernelTable;

constexpr double kU = 1.0 / (1 << 24);

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                              DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                              DType::kQ5_K, DType::kQ6_K};
const DType kActTypes[] = {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K, DType::kF16, DType::kBF16};

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> QuantizeRows(DType type, const std::vector<float>& x, int64_t rows, int64_t k,
                                  bool activation) {
  const size_t rb = *RowBytes(type, k);
  std::vector<uint8_t> out(rb * rows);
  const QuantizeRowFn fn = activation ? FindActivationQuantizeFn(type) : FindQuantizeRowFn(type);
  for (int64_t r = 0; r < rows; ++r) fn(x.data() + r * k, out.data() + r * rb, k);
  return out;
}

std::vector<float> DequantizeRows(DType type, const std::vector<uint8_t>& q, int64_t rows, int64_t k) {
  const size_t rb = *RowBytes(type, k);
  std::vector<float> out(rows * k);
  const DequantizeRowFn fn = FindDequantizeRowFn(type);
  for (int64_t r = 0; r < rows; ++r) fn(q.data() + r * rb, out.data() + r * k, k);
  return out;
}

// Q4_1 x Q8_1 uses the activation block sum s = f16(d * sum(q)) as stored, so the f16 rounding of
// s (relative <= 2^-11) times the weight block minimum is part of the format's result: ggml does
// the same. Twice that, summed over the blocks of the dot (0 for other formats).
double Q4_1MinTermError(DType wtype, const std::vector<uint8_t>& wq,
                        const std::vector<uint8_t>& aq, int64_t i, int64_t j, int64_t k) {
  if (wtype != DType::kQ4_1) return 0.0;
  const auto* w = reinterpret_cast<const BlockQ4_1*>(wq.data()) + j * (k / 32);
  const auto* x = reinterpret_cast<const BlockQ8_1*>(aq.data()) + i * (k / 32);
  double e = 0.0;
  for (int64_t b = 0; b < k / 32; ++b) {
    e += std::fabs(F16ToF32(w[b].m)) * std::fabs(F16ToF32(x[b].s)) * std::ldexp(1.0, -10);
  }
  return e;
}

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> isas;
  for (int i = 0; i < kernels::kNumIsas; ++i) {
    if (kernels::IsaAvailable(static_cast<Isa>(i))) isas.push_back(static_cast<Isa>(i));
  }
  return isas;
}

// --- activation converters ---------------------------------------------------------------------

// Rows that exercise the rounding corners: ties after scaling (amax 127 makes the Q8 scale 1),
// all-zero blocks, the largest magnitude repeated with both signs, denormals and f16 overflow.
std::vector<float> ConverterInput(int64_t k, uint32_t seed) {
  std::vector<float> x = RandomFloats(k, seed, 3.0f);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t block = i / 256;
    if (block % 4 == 1) x[i] = (i % 32 == 0) ? 127.0f : static_cast<float>(i % 97) - 48.5f;
    if (block % 4 == 2) x[i] = 0.0f;
    if (block % 4 == 3 && i % 64 == 5) x[i] = (i % 128 == 5) ? -9.0f : 9.0f;
  }
  x[1] = 1e-40f;   // f32 denormal
  x[2] = 70000.0f; // f16 overflow
  x[3] = 2.5f;     // a tie at scale 1 in block 0 is not guaranteed; ties live in block 1
  return x;
}

TEST(MatmulConvertTest, EveryIsaMatchesReferenceBytes) {
  for (Isa isa : AvailableIsas()) {
    const KernelTable& kt = kernels::GetKernelTable(isa);
    for (DType act : kActTypes) {
      for (int64_t k : {256, 1024, 4096}) {
        SCOPED_TRACE(std::string(kernels::IsaName(isa)) + " act=" + std::string(DTypeName(act)) +
                     " k=" + std::to_string(k));
        const std::vector<float> x = ConverterInput(k, static_cast<uint32_t>(k));
        const std::vector<uint8_t> want = QuantizeRows(act, x, 1, k, /*activation=*/true);
        std::vector<uint8_t> got(want.size(), 0xAB);
        ASSERT_NE(kt.convert_act[static_cast<int>(act)], nullptr);
        kt.convert_act[static_cast<int>(act)](x.data(), got.data(), k);
        size_t first_diff = want.size();
        for (size_t i = 0; i < want.size(); ++i) {
          if (want[i] != got[i]) {
            first_diff = i;
            break;
          }
        }
        EXPECT_EQ(first_diff, want.size()) << "first differing byte " << first_diff << ": want "
                                           << int(want[first_diff]) << " got " << int(got[first_diff]);
      }
    }
  }
}

// The packed matmul's one-pass activations: the Q8_0 bytes of the reference quantizer and, per
// block, the sum of its stored quants (what SumQ8_0Blocks computes from those bytes). A k that
// is not a multiple of 32 gives the zero-padded row's blocks (a float matrix of that k is packed
// so), read from x's own k values only.
TEST(MatmulConvertTest, EveryIsaConvertsQ8_0WithTheBlockSums) {
  for (Isa isa : AvailableIsas()) {
    const KernelTable& kt = kernels::GetKernelTable(isa);
    for (int64_t k : {32, 256, 4096, 20, 61, 100, 3420}) {
      SCOPED_TRACE(std::string(kernels::IsaName(isa)) + " k=" + std::to_string(k));
      std::vector<float> x = ConverterInput(k, static_cast<uint32_t>(k) + 7);
      if (k == 32) x.assign(32, -3.0f);  // every quant -127: the most negative sum
      const int64_t k_padded = (k + 31) / 32 * 32;
      std::vector<float> padded = x;
      padded.resize(static_cast<size_t>(k_padded), 0.0f);
      const std::vector<uint8_t> want =
          QuantizeRows(DType::kQ8_0, padded, 1, k_padded, /*activation=*/true);
      std::vector<int32_t> want_sums(static_cast<size_t>(k_padded / 32));
      kernels::SumQ8_0Blocks(want.data(), k_padded, want_sums.data());
      std::vector<uint8_t> got(want.size(), 0xAB);
      std::vector<int32_t> got_sums(want_sums.size() + 1, 12345);
      ASSERT_NE(kt.convert_q8_0_sums, nullptr);
      // x holds exactly k values: a read past them shows under ASan.
      kt.convert_q8_0_sums(x.data(), got.data(), got_sums.data(), k);
      EXPECT_EQ(got, want);
      EXPECT_EQ(std::vector<int32_t>(got_sums.begin(), got_sums.end() - 1), want_sums);
      EXPECT_EQ(got_sums.back(), 12345) << "wrote past the last block";
      if (k == 32) {
        EXPECT_EQ(want_sums[0], -127 * 32);
      }
    }
  }
}

// --- matmul -------------------------------------------------------------------------------------

struct Case {
  int64_t m, n, k;
};

std::string Vars(Isa isa, DType w, const Case& c, int threads) {
  return std::string("isa=") + std::string(kernels::IsaName(isa)) + " w=" +
         std::string(DTypeName(w)) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
         " k=" + std::to_string(c.k) + " threads=" + std::to_string(threads);
}

std::vector<Case> CasesFor(DType w) {
  const int64_t bs = GetDTypeTraits(w).block_size;
  std::vector<int64_t> ks;
  if (bs == 1) {
    ks = {7, 100, 4096};  // odd lengths exercise the vector tails
  } else {
    ks = {bs, 3 * bs, 4096};
  }
  std::vector<Case> cases;
  for (int64_t m : {1, 2, 5, 17, 64}) {
    // 45: a last 16-column panel whose second 8-column half is partial (AVX2 stores).
    for (int64_t n : {1, 3, 33, 45, 257}) {
      for (int64_t k : ks) {
        if (m * n * k > 17 * 257 * 4096) continue;  // keeps the scalar references fast
        cases.push_back({m, n, k});
      }
    }
  }
  return cases;
}

class MatmulTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTypeTest, EveryIsaMatchesReferences) {
  const DType wtype = GetParam();
  const KernelTable& ref_kt = kernels::GetKernelTable(Isa::kRef);
  const DType act = ref_kt.act_type[static_cast<int>(wtype)];
  ThreadPool pool2(2);
  ops::MatmulScratch scratch;
  uint32_t seed = 1;
  for (const Case& c : CasesFor(wtype)) {
    // Weights with a spread of row scales so that per-block scales differ.
    std::vector<float> wf = RandomFloats(c.n * c.k, seed++);
    for (int64_t r = 0; r < c.n; ++r) {
      for (int64_t i = 0; i < c.k; ++i) wf[r * c.k + i] *= 0.5f + static_cast<float>(r % 5);
    }
    const std::vector<uint8_t> wq = QuantizeRows(wtype, wf, c.n, c.k, /*activation=*/false);
    const std::vector<float> a = RandomFloats(c.m * c.k, seed++, 2.0f);
    // The double reference sees exactly what the kernels multiply: dequantized weights and the
    // reference conversion of the activations (the converters are byte-exact, tested above).
    const std::vector<float> wd = DequantizeRows(wtype, wq, c.n, c.k);
    const std::vector<uint8_t> aq = QuantizeRows(act, a, c.m, c.k, /*activation=*/true);
    const std::vector<float> ad = DequantizeRows(act, aq, c.m, c.k);
    std::vector<double> exact(c.m * c.n), bound(c.m * c.n);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0, sa = 0;
        for (int64_t t = 0; t < c.k; ++t) {
          const double p = static_cast<double>(wd[j * c.k + t]) * ad[i * c.k + t];
          s += p;
          sa += std::fabs(p);
        }
        exact[i * c.n + j] = s;
        bound[i * c.n + j] = (c.k + 32) * 4 * kU * sa + 1e-30 + Q4_1MinTermError(wtype, wq, aq, i, j, c.k);
      }
    }
    ops::WeightView wv{wtype, c.n, c.k, wq.data(), 0};
    std::vector<float> ref_out(c.m * c.n);
    ASSERT_TRUE(ops::MatMul(ref_kt, nullptr, wv, a.data(), c.m, c.k, ref_out.data(), c.n, &scratch).ok());
    for (Isa isa : AvailableIsas()) {
      const KernelTable& kt = kernels::GetKernelTable(isa);
      ASSERT_EQ(kt.act_type[static_cast<int>(wtype)], act) << kernels::IsaName(isa);
      for (int threads : {1, 2}) {
        SCOPED_TRACE(Vars(isa, wtype, c, threads));
        // Padded output rows check that the kernels honour ldo and write nothing else.
        const int64_t ldo = c.n + 3;
        std::vector<float> out(c.m * ldo, -12345.0f);
        ASSERT_TRUE(ops::MatMul(kt, threads == 2 ? &pool2 : nullptr, wv, a.data(), c.m, c.k,
                                out.data(), ldo, &scratch)
                        .ok());
        int bad = 0;
        for (int64_t i = 0; i < c.m && bad < 5; ++i) {
          for (int64_t j = 0; j < ldo && bad < 5; ++j) {
            const float got = out[i * ldo + j];
            if (j >= c.n) {
              if (got != -12345.0f) ++bad, ADD_FAILURE() << "wrote padding at " << i << "," << j;
              continue;
            }
            const double e = exact[i * c.n + j], tol = bound[i * c.n + j];
            if (!(std::fabs(got - e) <= tol)) {
              ++bad;
              ADD_FAILURE() << "[" << i << "," << j << "] got " << got << " exact " << e
                            << " tol " << tol;
            }
            const double r = ref_out[i * c.n + j];
            if (!(std::fabs(got - r) <= 2 * tol)) {
              ++bad;
              ADD_FAILURE() << "[" << i << "," << j << "] got " << got << " ref table " << r
                            << " tol " << 2 * tol;
            }
          }
        }
        if (bad) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTypeTest, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(MatmulOpTest, RejectsBadShapesAndTypes) {
  const KernelTable& kt = kernels::GetKernelTable(kernels::BestAvailableIsa());
  ops::MatmulScratch scratch;
  std::vector<uint8_t> w(18 * 64, 0);
  std::vector<float> a(64, 0.0f), out(4, 0.0f);
  // k not a multiple of the Q4_0 block.
  ops::WeightView bad_k{DType::kQ4_0, 1, 48, w.data(), 0};
  EXPECT_EQ(ops::MatMul(kt, nullptr, bad_k, a.data(), 1, 48, out.data(), 1, &scratch).code(),
            StatusCode::kInvalidArgument);
  // A type without a matmul (Q8_K is only ever an activation format).
  ops::WeightView q8k{DType::kQ8_K, 1, 256, w.data(), 0};
  std::vector<float> a256(256, 0.0f);
  EXPECT_EQ(ops::MatMul(kt, nullptr, q8k, a256.data(), 1, 256, out.data(), 1, &scratch).code(),
            StatusCode::kUnimplemented);
  // Leading dimensions too small, short row_bytes, missing scratch.
  ops::WeightView q40{DType::kQ4_0, 2, 32, w.data(), 0};
  EXPECT_EQ(ops::MatMul(kt, nullptr, q40, a.data(), 1, 16, out.data(), 2, &scratch).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ops::MatMul(kt, nullptr, q40, a.data(), 1, 32, out.data(), 1, &scratch).code(),
            StatusCode::kInvalidArgument);
  ops::WeightView short_rows{DType::kQ4_0, 2, 32, w.data(), 10};
  EXPECT_EQ(ops::MatMul(kt, nullptr, short_rows, a.data(), 1, 32, out.data(), 2, &scratch).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ops::MatMul(kt, nullptr, q40, a.data(), 1, 32, out.data(), 2, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ops::MatMul(kt, nullptr, q40, a.data(), 0, 32, out.data(), 2, &scratch).ok());
}

}  // namespace
}  // namespace vlmd::engine
