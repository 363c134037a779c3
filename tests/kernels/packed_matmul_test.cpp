// Packed int8 matmul (kernels/packed_int8.h): the packing keeps every weight exactly (Q8_0, Q4_0)
// or quantizes it by the Q8_0 rule (Q5_K/Q6_K; F32/F16/BF16 with one scale per column, or Q8_0
// blocks when a column would lose too much; fast precision); each ISA's kernel gives
// bit-identical results to the scalar reference on the same packed data (same integer dots and
// the same two roundings per block); and ops::MatMul on packed weights agrees with the plain GGUF
// path within the bound derived in matmul_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/kernels/packed_int8.h"
#include "engine/ops/matmul.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quant_blocks.h"
#include "engine/tensor/quantize.h"
#include "kernels/op_test_util.h"
#include "kernels/packed_test_util.h"

namespace vlmd::engine {
namespace {

using kernels::Isa;
using kernels::KernelTable;
using kernels::PackedMatrix;
using packed_test::PackedWeight;
using packed_test::RandomBlocks;
using packed_test::RandomFloats;
using packed_test::Rows;

// m activation rows of w.k() floats as the packed kernels take them (Q8_0 blocks and block sums),
// converted as the engine converts them (the converters are byte-exact). A k that is not a
// multiple of 32 (float weights) is the zero-padded row's conversion.
struct PackedActivations {
  std::vector<uint8_t> q8;
  std::vector<int32_t> sums;
  size_t row_bytes = 0;
};

PackedActivations ConvertActivations(const PackedMatrix& w, const std::vector<float>& a, int64_t m) {
  const int64_t k = w.k(), nb = w.blocks(), kp = nb * 32;
  PackedActivations act;
  act.row_bytes = *RowBytes(DType::kQ8_0, kp);
  act.q8.resize(act.row_bytes * m);
  act.sums.resize(m * nb);
  std::vector<float> padded(kp, 0.0f);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* row = act.q8.data() + r * act.row_bytes;
    std::copy_n(a.data() + r * k, k, padded.begin());
    quant::QuantizeRowQ8_0Act(padded.data(), reinterpret_cast<BlockQ8_0*>(row), kp);
    kernels::SumQ8_0Blocks(row, kp, act.sums.data() + r * nb);
  }
  return act;
}

kernels::PackedMatmulArgs ArgsFor(const PackedMatrix& w, const PackedActivations& act, float* out) {
  kernels::PackedMatmulArgs args;
  args.w = &w;
  args.a = act.q8.data();
  args.a_row_bytes = act.row_bytes;
  args.a_sums = act.sums.data();
  args.out = out;
  args.out_stride = w.n();
  return args;
}

// PackedMatmulRef over those rows: the output every packed kernel must equal bit for bit.
std::vector<float> PackedReference(const PackedMatrix& w, const std::vector<float>& a, int64_t m) {
  const PackedActivations act = ConvertActivations(w, a, m);
  std::vector<float> want(m * w.n());
  kernels::PackedMatmulRef(ArgsFor(w, act, want.data()), 0, m, 0, w.panels());
  return want;
}

std::vector<Isa> PackedIsas() {
  std::vector<Isa> isas;
  for (int i = 0; i < kernels::kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    if (kernels::IsaAvailable(isa) && kernels::GetKernelTable(isa).packed_matmul != nullptr) {
      isas.push_back(isa);
    }
  }
  return isas;
}

struct Case {
  int64_t m, n, k;
};

// Every SIMD table packs (AVX2 and plain AVX-512: vpmaddubsw; AVX-VNNI, VNNI: vpdpbusd; aarch64:
// SMMLA, SDOT, or widening multiplies without the dot product), so the tests below cover each ISA
// this CPU has, not only the best one.
TEST(PackedMatmulTest, EverySimdTableHasThePackedKernel) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16,
                  Isa::kAmx, Isa::kNeon, Isa::kNeonDot, Isa::kNeonI8mm}) {
    if (!kernels::IsaAvailable(isa)) continue;
    EXPECT_NE(kernels::GetKernelTable(isa).packed_matmul, nullptr) << kernels::IsaName(isa);
  }
  EXPECT_EQ(kernels::GetKernelTable(Isa::kRef).packed_matmul, nullptr);
}

TEST(PackedMatmulTest, EveryIsaIsBitExactWithTheReference) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  ThreadPool pool2(2);
  ops::MatmulScratch scratch;
  uint32_t seed = 11;
  // One row over 7 panels: GEMV tiles of 4 panels and a narrower last one; over 9 and 19
  // panels: the 4-bit GEMV's two-group tiles (8 panels) first, then the rest (19: split over two
  // threads, a partial last panel).
  // n = 29, 45, 71: a last panel whose second 8-column half is partial (the AVX2 tiles' masked
  // stores). From 16 rows the x86 GEMMs take prepared operands (4-bit quants unpacked per panel
  // block, f32 weight and activation scales): 19 and 21 rows end with a partial row tile; 70
  // rows are a call of 64 and one of 6 that converts per tile; 80 rows over 200 (q4_0) or 150
  // (q4_K) columns are calls over panel blocks 6 + 6 + 1 (or 6 + 4), on two threads as well.
  const std::vector<Case> cases = {Case{1, 1, 32},   Case{1, 17, 96},  Case{1, 100, 64},
                                   Case{2, 50, 256}, Case{3, 16, 64},  Case{4, 71, 128},
                                   Case{5, 33, 96},  Case{9, 64, 32},  Case{70, 40, 160},
                                   Case{1, 45, 64},  Case{2, 29, 96},  Case{7, 45, 64},
                                   Case{1, 141, 64}, Case{1, 300, 96}, Case{19, 71, 608},
                                   Case{80, 200, 96}};
  const std::vector<Case> k_cases = {Case{1, 17, 256}, Case{1, 100, 256}, Case{3, 50, 512},
                                     Case{70, 33, 256}, Case{1, 141, 256}, Case{1, 300, 512},
                                     Case{21, 71, 768}, Case{80, 150, 256}};
  // Float rows whose k is not a multiple of 32: the last block zero-padded on both sides (a k
  // below one block; GEMV and GEMM tiles; Qwen2.5-VL's 3420 = 106 blocks + 28).
  std::vector<Case> float_cases = cases;
  for (const Case& c : {Case{1, 17, 20}, Case{1, 45, 100}, Case{2, 29, 61}, Case{5, 33, 84},
                        Case{70, 40, 3420}}) {
    float_cases.push_back(c);
  }
  // F16: one scale per column (kQ8Col); F32 with an outlier weight in column 0: Q8_0 blocks
  // (kQ8) from k = 512 (a lone outlier costs its own block about as much as the column: the
  // squared error ratio is about k / 32, so shorter columns may keep one scale).
  for (DType type : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0, DType::kF16, DType::kF32,
                     DType::kQ4_K, DType::kQ6_K}) {
    const bool k_quant = type == DType::kQ4_K || type == DType::kQ6_K;
    const bool float_rows = type == DType::kF16 || type == DType::kF32;
    for (const Case& c : k_quant ? k_cases : float_rows ? float_cases : cases) {
      std::vector<float> wf = RandomFloats(c.n * c.k, seed++);
      for (int64_t r = 0; r < c.n; ++r) {
        for (int64_t i = 0; i < c.k; ++i) wf[r * c.k + i] *= 0.5f + static_cast<float>(r % 5);
      }
      if (type == DType::kF32) wf[0] = 200.0f;
      const std::vector<uint8_t> rows = Rows(type, wf, c.n, c.k);
      auto pm = PackedMatrix::Pack(type, rows.data(), *RowBytes(type, c.k), c.n, c.k);
      ASSERT_TRUE(pm.ok());
      if (type == DType::kF16 || (type == DType::kF32 && c.k >= 512)) {
        ASSERT_EQ((*pm)->format(), type == DType::kF16 ? kernels::PackedFormat::kQ8Col
                                                       : kernels::PackedFormat::kQ8);
      }
      const std::vector<float> a = RandomFloats(c.m * c.k, seed++, 2.0f);
      const std::vector<float> want = PackedReference(**pm, a, c.m);

      ops::WeightView wv{type, c.n, c.k, rows.data(), 0};
      wv.packed = pm->get();
      for (Isa isa : isas) {
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(kernels::IsaName(isa)) + " " + std::string(DTypeName(type)) +
                       " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                       " k=" + std::to_string(c.k) + " threads=" + std::to_string(threads));
          const int64_t ldo = c.n + 5;  // padding must stay untouched
          std::vector<float> out(c.m * ldo, -777.0f);
          ASSERT_TRUE(ops::MatMul(kernels::GetKernelTable(isa), threads == 2 ? &pool2 : nullptr, wv,
                                  a.data(), c.m, c.k, out.data(), ldo, &scratch)
                          .ok());
          int bad = 0;
          for (int64_t i = 0; i < c.m && bad < 5; ++i) {
            for (int64_t j = 0; j < ldo && bad < 5; ++j) {
              const float got = out[i * ldo + j];
              const float expect = j < c.n ? want[i * c.n + j] : -777.0f;
              if (std::memcmp(&got, &expect, sizeof(float)) != 0) {
                ++bad;
                ADD_FAILURE() << "[" << i << "," << j << "] got " << got << " want " << expect;
              }
            }
          }
        }
      }
    }
  }
}

// A kernel may keep data derived from a matrix between calls (the x86 GEMMs keep the panels they
// prepared last, per thread: 4-bit quants unpacked, f32 scales and mins; for every format): two
// matrices of one shape, at one address in turn
// (the second packed after the first is freed, which often reuses its memory), and alternated,
// each give their own reference's bits.
TEST(PackedMatmulTest, MatricesOfOneShapeDoNotShareDerivedData) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const int64_t m = 40, n = 50, k = 256;
  const std::vector<float> a = RandomFloats(m * k, 31, 2.0f);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    const std::vector<uint8_t> rows_a = Rows(type, RandomFloats(n * k, 32), n, k);
    const std::vector<uint8_t> rows_b = Rows(type, RandomFloats(n * k, 33), n, k);
    for (Isa isa : isas) {
      SCOPED_TRACE(std::string(kernels::IsaName(isa)) + " " + std::string(DTypeName(type)));
      const KernelTable& kt = kernels::GetKernelTable(isa);
      ops::MatmulScratch scratch;
      auto product = [&](const PackedMatrix& pm, const std::vector<uint8_t>& rows) {
        ops::WeightView wv{type, n, k, rows.data(), 0};
        wv.packed = &pm;
        std::vector<float> out(m * n);
        EXPECT_TRUE(ops::MatMul(kt, nullptr, wv, a.data(), m, k, out.data(), n, &scratch).ok());
        return out;
      };
      std::vector<float> want_b;
      {
        auto pa = PackedMatrix::Pack(type, rows_a.data(), *RowBytes(type, k), n, k);
        ASSERT_TRUE(pa.ok());
        ASSERT_EQ(product(**pa, rows_a), PackedReference(**pa, a, m));
      }
      auto pb = PackedMatrix::Pack(type, rows_b.data(), *RowBytes(type, k), n, k);
      auto pa = PackedMatrix::Pack(type, rows_a.data(), *RowBytes(type, k), n, k);
      ASSERT_TRUE(pb.ok() && pa.ok());
      want_b = PackedReference(**pb, a, m);
      const std::vector<float> want_a = PackedReference(**pa, a, m);
      ASSERT_NE(want_a, want_b);
      for (int round = 0; round < 2; ++round) {
        EXPECT_EQ(product(**pb, rows_b), want_b);
        EXPECT_EQ(product(**pa, rows_a), want_a);
      }
    }
  }
}

// The 4-bit GEMV tiles prefetch their weights a machine-chosen distance ahead (KernelTable::
// gemv_prefetch_blocks_q4, past the arrays' ends near the last blocks). A guard against the
// distance ever reaching a real load (wrong bits, or under ASan a read past the arrays): any
// distance gives the reference's bits on every table; and each table's distance is a sane one.
TEST(PackedMatmulTest, GemvPrefetchDistanceDoesNotChangeTheResult) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const int64_t n = 100, k = 512;
  for (DType type : {DType::kQ4_0, DType::kQ4_K}) {
    const std::vector<float> wf = RandomFloats(n * k, 21);
    const std::vector<uint8_t> rows = Rows(type, wf, n, k);
    auto pm = PackedMatrix::Pack(type, rows.data(), *RowBytes(type, k), n, k);
    ASSERT_TRUE(pm.ok());
    for (int64_t m : {int64_t{1}, int64_t{2}}) {
      const std::vector<float> a = RandomFloats(m * k, 22);
      const std::vector<float> want = PackedReference(**pm, a, m);
      const PackedActivations act = ConvertActivations(**pm, a, m);
      for (Isa isa : isas) {
        const KernelTable& kt = kernels::GetKernelTable(isa);
        EXPECT_GE(kt.gemv_prefetch_blocks_q4, 1);
        EXPECT_LE(kt.gemv_prefetch_blocks_q4, 64);
        for (int64_t ahead : {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{64}}) {
          SCOPED_TRACE(std::string(kernels::IsaName(isa)) + " " + std::string(DTypeName(type)) +
                       " m=" + std::to_string(m) + " ahead=" + std::to_string(ahead));
          std::vector<float> got(m * n, -1.0f);
          kernels::PackedMatmulArgs args = ArgsFor(**pm, act, got.data());
          args.gemv_prefetch_blocks_q4 = ahead;
          kt.packed_matmul(args, 0, m, 0, (*pm)->panels());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
        }
      }
    }
  }
}

// The largest products the formats allow: Q8_0 quants of -128 and +127 (a GGUF file may hold
// -128) against activations that quantize to +-127, all of one sign along k or alternating.
// The kernels that sum two products in int16 before widening (AVX2's vpmaddubsw, aarch64
// without the dot product) reach their 32512 limit here; a wrap or saturation shows as a
// difference from the reference.
TEST(PackedMatmulTest, ExtremeQ8ProductsAreExact) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const int64_t n = 20, k = 64, m = 3;
  std::vector<BlockQ8_0> w(n * (k / 32));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < k / 32; ++b) {
      BlockQ8_0& blk = w[r * (k / 32) + b];
      blk.d = F32ToF16(0.01f * static_cast<float>(r + 1));
      for (int e = 0; e < 32; ++e) {
        const bool low = r % 3 == 0 || (r % 3 == 2 && e % 2 == 0);
        blk.qs[e] = static_cast<int8_t>(low ? -128 : 127);
      }
    }
  }
  auto pm = PackedMatrix::Pack(DType::kQ8_0, w.data(), sizeof(BlockQ8_0) * (k / 32), n, k);
  ASSERT_TRUE(pm.ok());
  std::vector<float> a(m * k);
  for (int64_t i = 0; i < k; ++i) {
    a[i] = -1.0f;                         // quantizes to -127 everywhere
    a[k + i] = 1.0f;                      // +127
    a[2 * k + i] = i % 2 ? 1.0f : -1.0f;  // alternating
  }
  for (int64_t r = 0; r < m; ++r) {  // every activation quantizes to +-127
    BlockQ8_0 q;
    quant::QuantizeRowQ8_0Act(a.data() + r * k, &q, 32);
    EXPECT_EQ(q.qs[0], r == 1 ? 127 : -127);
  }
  const std::vector<float> want = PackedReference(**pm, a, m);
  ops::WeightView wv{DType::kQ8_0, n, k, reinterpret_cast<const uint8_t*>(w.data()), 0};
  wv.packed = pm->get();
  ops::MatmulScratch scratch;
  for (Isa isa : isas) {
    for (int64_t rows : {int64_t{1}, m}) {  // the GEMV tile and the GEMM tiles
      SCOPED_TRACE(std::string(kernels::IsaName(isa)) + " rows=" + std::to_string(rows));
      std::vector<float> out(m * n, -777.0f);
      ASSERT_TRUE(ops::MatMul(kernels::GetKernelTable(isa), nullptr, wv, a.data(), rows, k,
                              out.data(), n, &scratch)
                      .ok());
      for (int64_t i = 0; i < rows * n; ++i) {
        ASSERT_EQ(std::memcmp(&out[i], &want[i], sizeof(float)), 0)
            << "[" << i / n << "," << i % n << "] got " << out[i] << " want " << want[i];
      }
    }
  }
  // The products really are the extremes: column 0, row 0 is 64 x (-128) x (-127) scaled.
  EXPECT_NEAR(want[0], 64.0 * 128 * 127 * 0.01 / 127, 0.05);
}

// The packed path against the GGUF-layout path of the reference table (vec-dots written
// independently of the packing): the same integer dots and scales, summed in another order.
// Bound of matmul_test.cpp per element: (k + 32) 4u sum|w a| over the dequantized operands, twice.
TEST(PackedMatmulTest, AgreesWithTheGgufLayoutPath) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  const KernelTable& ref = kernels::GetKernelTable(Isa::kRef);
  ops::MatmulScratch scratch;
  const int64_t m = 6, n = 45, k = 512;
  for (DType type : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0, DType::kIQ4_NL}) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const std::vector<uint8_t> rows = type == DType::kIQ4_NL ? RandomBlocks(type, n, k, 3)
                                                             : Rows(type, RandomFloats(n * k, 3), n, k);
    const std::vector<float> a = RandomFloats(m * k, 4);
    ops::WeightView plain{type, n, k, rows.data(), 0};
    ops::PackedStore store;
    ops::WeightView packed = plain;
    ASSERT_TRUE(ops::PackWeight({&kt, ops::Precision::kExact}, &packed, &store).ok());
    ASSERT_NE(packed.packed, nullptr);
    std::vector<float> want(m * n), got(m * n);
    ASSERT_TRUE(ops::MatMul(ref, nullptr, plain, a.data(), m, k, want.data(), n, &scratch).ok());
    ASSERT_TRUE(ops::MatMul(kt, nullptr, packed, a.data(), m, k, got.data(), n, &scratch).ok());
    std::vector<float> wd(k), ad(k);
    std::vector<BlockQ8_0> aq(k / 32);
    int bad = 0;
    for (int64_t i = 0; i < m && bad < 5; ++i) {
      quant::QuantizeRowQ8_0Act(a.data() + i * k, aq.data(), k);
      quant::DequantizeRowQ8_0(aq.data(), ad.data(), k);
      for (int64_t j = 0; j < n && bad < 5; ++j) {
        ASSERT_TRUE(DequantizeRow(type, rows.data() + j * *RowBytes(type, k), wd.data(), k).ok());
        double sa = 0;
        for (int64_t t = 0; t < k; ++t) sa += std::fabs(double(wd[t]) * ad[t]);
        const double tol = 2.0 * (k + 32) * 4.0 / (1 << 24) * sa;
        if (!(std::fabs(got[i * n + j] - want[i * n + j]) <= tol)) {
          ++bad;
          ADD_FAILURE() << "[" << i << "," << j << "] packed " << got[i * n + j] << " gguf "
                        << want[i * n + j] << " tol " << tol;
        }
      }
    }
  }
}

// Packed Q4_K (fast precision) against the exact product of its weights with the unrounded
// activations: the error is the activations' Q8_0 rounding (at most d_a / 2 per element, d_a =
// the block's absmax / 127) times |w|, plus f32 summation.
TEST(PackedMatmulTest, PackedQ4KIsWithinActivationRoundingOfTheExactProduct) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  const int64_t m = 5, n = 37, k = 768;
  const std::vector<uint8_t> rows = Rows(DType::kQ4_K, RandomFloats(n * k, 8), n, k);
  const std::vector<float> a = RandomFloats(m * k, 9);
  ops::WeightView w{DType::kQ4_K, n, k, rows.data(), 0};
  ops::PackedStore store;
  ASSERT_TRUE(ops::PackWeight({&kt, ops::Precision::kFast}, &w, &store).ok());
  ASSERT_NE(w.packed, nullptr);
  std::vector<float> got(m * n);
  ops::MatmulScratch scratch;
  ThreadPool pool(2);
  ASSERT_TRUE(ops::MatMul(kt, &pool, w, a.data(), m, k, got.data(), n, &scratch).ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0.0, bound = 0.0, sum_abs = 0.0;
      for (int64_t b = 0; b < k / 32; ++b) {
        float amax = 0.0f;
        for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(a[i * k + b * 32 + e]));
        for (int e = 0; e < 32; ++e) {
          const int64_t t = b * 32 + e;
          const double wv = PackedWeight(*w.packed, j, t);
          exact += wv * a[i * k + t];
          bound += std::fabs(wv) * (amax / 127.0) * 0.5 * 1.01;
          sum_abs += std::fabs(wv * a[i * k + t]);
        }
      }
      const double tol = bound + 1e-5 * sum_abs;
      ASSERT_NEAR(got[i * n + j], exact, tol) << "[" << i << "," << j << "]";
    }
  }
}

// The load's memory cap (ops::PackedBytesCap): each matrix is charged the most its layout can
// take before it is packed and settles at what it took, so that the cap ends holding exactly the
// store's bytes; one that does not fit is refused before anything is packed.
TEST(PackWeightTest, CapChargesTheMostBeforePackingAndSettlesAtWhatWasTaken) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  const int64_t n = 40;  // not a whole number of panels or panel groups
  // Float rows take one scale per column (smaller than kQ8's blocks at k = 256, larger at 32)
  // unless a column fails the error test (an outlier): then kQ8 blocks after the first try.
  for (const auto [k, outlier] : {std::pair{int64_t{32}, false}, std::pair{int64_t{256}, false},
                                  std::pair{int64_t{256}, true}}) {
    std::vector<float> wf = RandomFloats(n * k, 21);
    if (outlier) wf[3 * k + 5] *= 1000.0f;
    for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ2_K}) {
      if ((type == DType::kQ4_K || type == DType::kQ2_K) && k % 256 != 0) continue;
      const bool float_rows = type == DType::kF32 || type == DType::kF16;
      if (outlier && !float_rows) continue;
      SCOPED_TRACE(std::string(DTypeName(type)) + " k=" + std::to_string(k) + (outlier ? " outlier" : ""));
      const std::vector<uint8_t> rows =
          type == DType::kQ2_K ? RandomBlocks(type, n, k, 3) : Rows(type, wf, n, k);
      ops::PackedBytesCap roomy(uint64_t{1} << 40);
      ASSERT_TRUE(roomy.Charge(1000, "earlier").ok());
      ops::WeightView w{type, n, k, rows.data(), 0};
      w.name = "blk.0.ffn_up.weight";
      ops::PackedStore store;
      ASSERT_TRUE(ops::PackWeight({.kt = &kt, .precision = ops::Precision::kFast, .cap = &roomy}, &w, &store).ok());
      ASSERT_NE(w.packed, nullptr);
      EXPECT_EQ(roomy.charged(), 1000 + ops::PackedBytes(store));
      if (float_rows) {
        EXPECT_EQ(w.packed->format(), outlier ? kernels::PackedFormat::kQ8 : kernels::PackedFormat::kQ8Col);
      }
      // The cap one byte short of the most this matrix could take: refused, nothing packed.
      const uint64_t most =
          std::max(PackedMatrix::BytesFor(kernels::PackedFormatOf(type), n, k),
                   type == DType::kQ4_0 || type == DType::kQ4_K
                       ? 0
                       : PackedMatrix::BytesFor(kernels::PackedFormat::kQ8Col, n, k));
      EXPECT_GE(most, ops::PackedBytes(store));
      ops::PackedBytesCap tight(1000 + most - 1);
      ASSERT_TRUE(tight.Charge(1000, "earlier").ok());
      ops::WeightView w2{type, n, k, rows.data(), 0};
      w2.name = "blk.0.ffn_up.weight";
      ops::PackedStore store2;
      const Status s = ops::PackWeight({.kt = &kt, .precision = ops::Precision::kFast, .cap = &tight}, &w2, &store2);
      EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
      EXPECT_NE(s.message().find("'blk.0.ffn_up.weight'"), std::string::npos) << s.message();
      EXPECT_EQ(w2.packed, nullptr);
      EXPECT_EQ(store2.size(), 0u);
      EXPECT_EQ(tight.charged(), 1000u);
      ops::PackedBytesCap exact(1000 + most);
      ASSERT_TRUE(exact.Charge(1000, "earlier").ok());
      ops::WeightView w3{type, n, k, rows.data(), 0};
      ops::PackedStore store3;
      EXPECT_TRUE(ops::PackWeight({.kt = &kt, .precision = ops::Precision::kFast, .cap = &exact}, &w3, &store3).ok());
      EXPECT_EQ(exact.charged(), 1000 + ops::PackedBytes(store3));
    }
  }
  // A fused matrix (q, k, v as one) is charged as one.
  const int64_t k = 64;
  const std::vector<uint8_t> rows = Rows(DType::kQ8_0, RandomFloats(n * k, 22), n, k);
  const ops::WeightView part{DType::kQ8_0, n, k, rows.data(), 0};
  const ops::WeightView* parts[] = {&part, &part, &part};
  ops::PackedBytesCap cap(PackedMatrix::BytesFor(kernels::PackedFormat::kQ8, 3 * n, k) - 1);
  ops::PackedStore store;
  auto fused = ops::PackFusedWeights({.kt = &kt, .precision = ops::Precision::kExact, .cap = &cap}, parts, &store);
  EXPECT_EQ(fused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store.size(), 0u);
  ops::PackedBytesCap enough(PackedMatrix::BytesFor(kernels::PackedFormat::kQ8, 3 * n, k));
  fused = ops::PackFusedWeights({.kt = &kt, .precision = ops::Precision::kExact, .cap = &enough}, parts, &store);
  ASSERT_TRUE(fused.ok());
  ASSERT_NE(fused->packed, nullptr);
  EXPECT_EQ(enough.charged(), fused->packed->bytes());
}

TEST(PackWeightTest, PrecisionDecidesWhichTypesArePacked) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  const int64_t n = 8, k = 256;
  const std::vector<float> wf = RandomFloats(n * k, 5);
  auto packed_for = [&](DType type, ops::Precision precision, const KernelTable* table) {
    const std::vector<uint8_t> rows = Rows(type, wf, n, k);
    ops::WeightView w{type, n, k, rows.data(), 0};
    ops::PackedStore store;
    EXPECT_TRUE(ops::PackWeight({table, precision}, &w, &store).ok());
    return w.packed != nullptr;
  };
  EXPECT_TRUE(packed_for(DType::kQ8_0, ops::Precision::kExact, &kt));
  EXPECT_TRUE(packed_for(DType::kQ4_0, ops::Precision::kExact, &kt));
  EXPECT_TRUE(packed_for(DType::kQ5_0, ops::Precision::kExact, &kt));
  EXPECT_FALSE(packed_for(DType::kF16, ops::Precision::kExact, &kt));
  EXPECT_TRUE(packed_for(DType::kF16, ops::Precision::kFast, &kt));
  EXPECT_TRUE(packed_for(DType::kF32, ops::Precision::kFast, &kt));
  EXPECT_FALSE(packed_for(DType::kQ4_K, ops::Precision::kExact, &kt));  // Q8_K activations
  EXPECT_TRUE(packed_for(DType::kQ4_K, ops::Precision::kFast, &kt));
  for (DType type : {DType::kQ5_K, DType::kQ6_K}) {  // their values as Q8_0 blocks: fast only
    EXPECT_FALSE(packed_for(type, ops::Precision::kExact, &kt));
    EXPECT_TRUE(packed_for(type, ops::Precision::kFast, &kt));
  }
  // The formats with only the scalar reference dot: their values as Q8_0 blocks, fast only;
  // IQ4_NL's levels are bytes: repacked exactly, in both.
  for (DType type : {DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS}) {
    const std::vector<uint8_t> rows = RandomBlocks(type, n, k, 9);
    for (ops::Precision precision : {ops::Precision::kExact, ops::Precision::kFast}) {
      ops::WeightView w{type, n, k, rows.data(), 0};
      ops::PackedStore store;
      EXPECT_TRUE(ops::PackWeight({&kt, precision}, &w, &store).ok());
      EXPECT_EQ(w.packed != nullptr, precision == ops::Precision::kFast || type == DType::kIQ4_NL)
          << DTypeName(type);
    }
  }
  EXPECT_FALSE(packed_for(DType::kQ4_1, ops::Precision::kFast, &kt));  // keeps its own kernel
  EXPECT_FALSE(packed_for(DType::kQ8_0, ops::Precision::kFast, nullptr));
  EXPECT_FALSE(packed_for(DType::kQ8_0, ops::Precision::kFast, &kernels::GetKernelTable(Isa::kRef)));
}

// Fast precision on float weights: int8 on both sides (the weights with one scale per column, the
// activations in Q8_0 blocks). Normalized error against the f32 product stays well under the
// 1e-3 the vision parity allows for whole embeddings: for Gaussian weights the column rule's
// (amax / sigma)^2 / (127^2 * 12) is ~8e-5 at k = 3420 (amax ~3.9 sigma), the activations'
// blocks add ~3e-5 (amax ~2.45 sigma); 3e-4 leaves room for the sample (one row: 64 outputs).
// Also for a k that is not a multiple of 32 (the zero-padded last block), which PackWeight packs
// for float weights only.
TEST(PackedMatmulTest, FastPrecisionFloatWeightsStayClose) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  ops::MatmulScratch scratch;
  ThreadPool pool2(2);
  const int64_t n = 64;
  // m = 64: a prompt's row count, which takes the tile unit on AMX for whole blocks only.
  for (const int64_t k : {int64_t{768}, int64_t{3420}, int64_t{20}}) {
    for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{64}}) {
      SCOPED_TRACE("k=" + std::to_string(k) + " m=" + std::to_string(m));
      const std::vector<float> wf = RandomFloats(n * k, 9, 0.05f);
      const std::vector<float> a = RandomFloats(m * k, 10);
      ops::WeightView w{DType::kF32, n, k, wf.data(), 0};
      std::vector<float> exact(m * n), fast(m * n);
      ASSERT_TRUE(ops::MatMul(kt, nullptr, w, a.data(), m, k, exact.data(), n, &scratch).ok());
      ops::PackedStore store;
      ASSERT_TRUE(ops::PackWeight({&kt, ops::Precision::kFast}, &w, &store).ok());
      ASSERT_NE(w.packed, nullptr);
      if (k % 32 != 0) {
        EXPECT_EQ(w.packed_tile_route, ops::PackedTileRoute::kNever);
      }
      ASSERT_TRUE(ops::MatMul(kt, &pool2, w, a.data(), m, k, fast.data(), n, &scratch).ok());
      double err = 0, ref = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        err += (fast[i] - exact[i]) * double(fast[i] - exact[i]);
        ref += exact[i] * double(exact[i]);
      }
      EXPECT_GT(err, 0.0);  // it did take the int8 path
      EXPECT_LT(err / ref, 3e-4);
    }
  }
  // Block types' rows are whole blocks: a Q8_0 view of k = 40 is not packed (and not readable).
  ops::WeightView q8{DType::kQ8_0, n, 40, nullptr, 0};
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 68, 0);
  q8.data = bytes.data();
  ops::PackedStore store;
  ASSERT_TRUE(ops::PackWeight({&kt, ops::Precision::kFast}, &q8, &store).ok());
  EXPECT_EQ(q8.packed, nullptr);
}

// A fused matrix (PackFusedWeights: Q/K/V or gate/up in one matmul) gives, column for column, the
// bits of the separate packed matmuls: each output column depends only on its own weights.
TEST(PackFusedWeightsTest, FusedOutputsAreTheSeparateOutputsSideBySide) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  ThreadPool pool2(2);
  ops::MatmulScratch scratch;
  const int64_t k = 160;
  const int64_t widths[] = {40, 17, 33};  // not multiples of the 16-column panel
  uint32_t seed = 21;
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kF16}) {
    std::vector<std::vector<uint8_t>> rows;
    std::vector<ops::WeightView> parts;
    for (int64_t n : widths) {
      rows.push_back(Rows(type, RandomFloats(n * k, seed++), n, k));
      parts.push_back({type, n, k, rows.back().data(), 0});
    }
    const ops::WeightView* ptrs[] = {&parts[0], &parts[1], &parts[2]};
    ops::PackedStore store;
    auto fused = ops::PackFusedWeights({&kt, ops::Precision::kFast}, ptrs, &store);
    ASSERT_TRUE(fused.ok()) << fused.status().ToString();
    ASSERT_NE(fused->packed, nullptr);
    EXPECT_EQ(fused->data, nullptr);
    EXPECT_EQ(fused->n, 90);
    for (ops::WeightView& w : parts) {
      EXPECT_EQ(w.packed, nullptr);  // the parts stay as they were
      ASSERT_TRUE(ops::PackWeight({&kt, ops::Precision::kFast}, &w, &store).ok());
    }
    for (int64_t m : {1, 3, 70}) {
      SCOPED_TRACE(std::string(DTypeName(type)) + " m=" + std::to_string(m));
      const std::vector<float> a = RandomFloats(m * k, seed++);
      std::vector<float> got(m * fused->n);
      ASSERT_TRUE(ops::MatMul(kt, &pool2, *fused, a.data(), m, k, got.data(), fused->n, &scratch).ok());
      int64_t col0 = 0;
      for (const ops::WeightView& w : parts) {
        std::vector<float> want(m * w.n);
        ASSERT_TRUE(ops::MatMul(kt, nullptr, w, a.data(), m, k, want.data(), w.n, &scratch).ok());
        for (int64_t i = 0; i < m; ++i) {
          ASSERT_EQ(0, std::memcmp(&got[i * fused->n + col0], &want[i * w.n], w.n * sizeof(float)))
              << "row " << i << " part at column " << col0;
        }
        col0 += w.n;
      }
    }
  }
}

TEST(PackFusedWeightsTest, DoesNotFuseWhatItCannot) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  const int64_t k = 64;
  const std::vector<float> wf = RandomFloats(8 * k, 31);
  const auto q4 = Rows(DType::kQ4_0, wf, 8, k), q8 = Rows(DType::kQ8_0, wf, 8, k),
             f16 = Rows(DType::kF16, wf, 8, k);
  const ops::WeightView a{DType::kQ4_0, 8, k, q4.data(), 0}, b{DType::kQ8_0, 8, k, q8.data(), 0},
      c{DType::kF16, 8, k, f16.data(), 0};
  auto fuses = [&](std::vector<const ops::WeightView*> parts, ops::Precision precision,
                   const KernelTable* table) {
    ops::PackedStore store;
    auto fused = ops::PackFusedWeights({table, precision}, parts, &store);
    EXPECT_TRUE(fused.ok());
    return fused.ok() && fused->packed != nullptr;
  };
  EXPECT_TRUE(fuses({&b, &c}, ops::Precision::kFast, &kt));     // both pack to int8 blocks
  EXPECT_FALSE(fuses({&a, &b}, ops::Precision::kFast, &kt));    // nibbles and bytes: two formats
  EXPECT_FALSE(fuses({&b, &c}, ops::Precision::kExact, &kt));   // F16 is not packed in exact
  EXPECT_FALSE(fuses({&b, &b}, ops::Precision::kFast, nullptr));
  // A fused view without the packed kernel is an error, never a read past the first part.
  ops::PackedStore store;
  const ops::WeightView* parts[] = {&b, &b};
  auto fused = ops::PackFusedWeights({&kt, ops::Precision::kExact}, parts, &store);
  ASSERT_TRUE(fused.ok() && fused->packed != nullptr);
  std::vector<float> x(k, 1.0f), y(16);
  ops::MatmulScratch scratch;
  EXPECT_FALSE(ops::MatMul(kernels::GetKernelTable(Isa::kRef), nullptr, *fused, x.data(), 1, k,
                           y.data(), 16, &scratch).ok());
}

// The residual epilogue on a 4-bit packed matrix (groups of 4 panels), one row split into many
// ranges over two threads: each range adds the residual to its own columns, so the result is
// the product plus the residual everywhere. A residual overlapping the output is refused.
TEST(PackedMatmulTest, ResidualEpilogueAcrossGemvRanges) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const KernelTable& kt = kernels::GetKernelTable(isas.back());
  const int64_t n = 2000, k = 128;  // 125 panels: ranges of whole groups and a partial one
  const std::vector<uint8_t> rows = Rows(DType::kQ4_0, RandomFloats(n * k, 51), n, k);
  ops::WeightView w{DType::kQ4_0, n, k, rows.data(), 0};
  ops::PackedStore store;
  ASSERT_TRUE(ops::PackWeight({&kt, ops::Precision::kExact}, &w, &store).ok());
  ASSERT_NE(w.packed, nullptr);
  ASSERT_EQ(w.packed->group_panels(), kernels::kPanelGroup);
  const std::vector<float> a = RandomFloats(k, 52), res = RandomFloats(n, 53);
  ThreadPool pool(2);
  ops::MatmulScratch scratch;
  std::vector<float> want(n), got(n);
  ASSERT_TRUE(ops::MatMul(kt, &pool, w, a.data(), 1, k, want.data(), n, &scratch).ok());
  ops::MatmulEpilogue ep;
  ep.residual = res.data();
  ep.ld_residual = n;
  ASSERT_TRUE(ops::MatMul(kt, &pool, w, a.data(), 1, k, got.data(), n, &scratch, &ep).ok());
  for (int64_t c = 0; c < n; ++c) ASSERT_EQ(got[c], want[c] + res[c]) << c;
  ep.residual = got.data() + 7;  // overlaps the output
  EXPECT_FALSE(ops::MatMul(kt, &pool, w, a.data(), 1, k, got.data(), n, &scratch, &ep).ok());
}

// The load log's account of a store (ops::PackingSummary): each matrix counted once, by what it
// was packed from and how: float rows with column scales or, after a failed column, Q8_0
// blocks; quantized rows (alone or fused with float ones) as int8; Q4_0 as nibbles.
TEST(PackedMatmulTest, PackingSummaryCountsEachMatrixByItsSourceAndFormat) {
  const std::vector<Isa> isas = PackedIsas();
  if (isas.empty()) GTEST_SKIP() << "no ISA of this CPU has a packed int8 matmul";
  const ops::WeightPacking fast{&kernels::GetKernelTable(isas.back()), ops::Precision::kFast};
  const int64_t n = 40, k = 256;
  const std::vector<float> gauss = RandomFloats(n * k, 61);
  std::vector<float> outlier = gauss;
  outlier[7 * k + 100] = 60.0f;  // one column far from Gaussian: that matrix keeps blocks
  const std::vector<uint8_t> f16 = Rows(DType::kF16, gauss, n, k);
  const std::vector<uint8_t> q8 = Rows(DType::kQ8_0, gauss, n, k);
  const std::vector<uint8_t> q4 = Rows(DType::kQ4_0, gauss, n, k);
  ops::PackedStore store;
  EXPECT_EQ(ops::SummarizePacking(store).ToString(), "none");
  std::vector<ops::WeightView> views = {{DType::kF32, n, k, gauss.data(), 0},
                                        {DType::kF16, n, k, f16.data(), 0},
                                        {DType::kF32, n, k, outlier.data(), 0},
                                        {DType::kQ8_0, n, k, q8.data(), 0},
                                        {DType::kQ4_0, n, k, q4.data(), 0}};
  for (ops::WeightView& v : views) {
    ASSERT_TRUE(ops::PackWeight(fast, &v, &store).ok());
    ASSERT_NE(v.packed, nullptr);
  }
  const ops::WeightView f16_part{DType::kF16, n, k, f16.data(), 0};
  const ops::WeightView q8_part{DType::kQ8_0, n, k, q8.data(), 0};
  const ops::WeightView* parts[] = {&f16_part, &q8_part};
  auto fused = ops::PackFusedWeights(fast, parts, &store);
  ASSERT_TRUE(fused.ok());
  ASSERT_NE(fused->packed, nullptr);

  const ops::PackingSummary p = ops::SummarizePacking(store);
  EXPECT_EQ(p.float_column_scaled, 2);
  EXPECT_EQ(p.float_q8_blocks, 1);
  EXPECT_EQ(p.quant_int8, 2);  // Q8_0, and F16 fused with Q8_0
  EXPECT_EQ(p.quant_4bit, 1);
  EXPECT_EQ(p.bf16_tiles, 0);
  EXPECT_EQ(p.matrices(), 6);
  EXPECT_EQ(p.bytes, ops::PackedBytes(store));
  const std::string text = p.ToString();
  EXPECT_NE(text.find("6 matrices"), std::string::npos) << text;
  EXPECT_NE(text.find("float 2 column-scaled + 1 Q8_0-block"), std::string::npos) << text;
  EXPECT_NE(text.find("2 int8 from quantized rows"), std::string::npos) << text;
  EXPECT_NE(text.find("1 4-bit"), std::string::npos) << text;
  ops::PackingSummary twice = p;
  twice += p;
  EXPECT_EQ(twice.matrices(), 12);
  EXPECT_EQ(twice.bytes, 2 * p.bytes);
}

}  // namespace
}  // namespace vlmd::engine
