// bf16 tile matmul (kernels/tile_bf16.h): packing puts every weight at its documented place as
// bf16 (padding zero), the AMX kernel agrees with the scalar reference on the same bf16 operands
// (same products, f32 sums in another order), and ops::MatMul over tile-packed weights stays
// within bf16 rounding of the f32 product. On a CPU without AMX the tile matmul tests are skipped
// (no table holds the kernel); packing, the bf16 row kernels and the flash attention (every x86
// table from avx2 up, every arm64 table) and the reference still run.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/tile_bf16.h"
#include "engine/ops/matmul.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"
#include "kernels/op_test_util.h"

namespace vlmd::engine {
namespace {

using kernels::TileBf16Args;
using kernels::TileBf16Matrix;
using vlmd::testing::ForEachTableWith;

// The packed bf16 value of weight (col, i).
uint16_t PackedAt(const uint16_t* data, int64_t k, int64_t col, int64_t i) {
  const uint16_t* panel = data + (col / kernels::kTileCols) * k * kernels::kTileCols;
  return panel[(i / 2) * 2 * kernels::kTileCols + (col % kernels::kTileCols) * 2 + i % 2];
}

// The table holding the tile kernel on this CPU, or nullptr.
const kernels::KernelTable* TileTable() {
  for (auto isa : vlmd::testing::AvailableIsas()) {
    const auto& kt = kernels::GetKernelTable(isa);
    if (kt.tile_bf16_matmul != nullptr) return &kt;
  }
  return nullptr;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = F32ToBF16(x[i]);
  return y;
}

TEST(TileBf16Pack, EveryWeightLandsAtItsPlaceAndPaddingIsZero) {
  const int64_t n = 37;
  // k = 40 is not a whole tile step: the panels hold 64 values per column, the last 24 zero.
  for (int64_t k : {96, 40}) {
    const std::vector<float> w = vlmd::testing::RandomNormal(n * k, 3);
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
      if (k % 32 != 0 && type == DType::kQ8_0) continue;  // Q8_0 rows are whole blocks of 32
      SCOPED_TRACE(std::string(DTypeName(type)) + " k=" + std::to_string(k));
      const size_t rb = *RowBytes(type, k);
      std::vector<uint8_t> rows(rb * n);
      for (int64_t r = 0; r < n; ++r) {
        ASSERT_TRUE(QuantizeRow(type, w.data() + r * k, rows.data() + r * rb, k).ok());
      }
      auto tm = TileBf16Matrix::Pack(type, rows.data(), rb, n, k);
      ASSERT_TRUE(tm.ok()) << tm.status().ToString();
      ASSERT_EQ((*tm)->panels(), 3);
      ASSERT_EQ((*tm)->k(), k);
      const int64_t kp = (*tm)->k_padded();
      ASSERT_EQ(kp, (k + 31) / 32 * 32);
      std::vector<float> deq(static_cast<size_t>(k));
      for (int64_t col = 0; col < 48; ++col) {
        if (col < n) {
          ASSERT_TRUE(DequantizeRow(type, rows.data() + col * rb, deq.data(), k).ok());
        }
        for (int64_t i = 0; i < kp; ++i) {
          const uint16_t want = col < n && i < k ? F32ToBF16(deq[i]) : 0;
          ASSERT_EQ(PackedAt((*tm)->data(), kp, col, i), want) << "col " << col << " i " << i;
        }
      }
    }
  }
  const std::vector<float> w = vlmd::testing::RandomNormal(n * 256, 3);
  EXPECT_FALSE(TileBf16Matrix::Pack(DType::kQ4_K, w.data(), 1024, n, 256).ok());
  EXPECT_FALSE(TileBf16Matrix::Pack(DType::kF32, w.data(), 8, n, 96).ok());  // row_bytes
  EXPECT_FALSE(TileBf16Matrix::Pack(DType::kF32, w.data(), 4, n, 0).ok());   // k
}

TEST(TileBf16Pack, PackRowsAndColumnsZeroExtendK) {
  // A [20, 40] bf16 matrix in rows of stride 41 (one spare element per row).
  const int64_t rows = 20, width = 40, stride = 41;
  const std::vector<uint16_t> m = ToBf16(vlmd::testing::RandomNormal(rows * stride, 5));
  // PackRows: column j = row j (k_valid 40 -> k 64).
  std::vector<uint16_t> dst(TileBf16Matrix::PanelElements(rows, 64), 0xFFFF);
  TileBf16Matrix::PackRows(m.data(), stride, rows, width, 64, dst.data());
  for (int64_t col = 0; col < 32; ++col) {
    for (int64_t i = 0; i < 64; ++i) {
      const uint16_t want = col < rows && i < width ? m[col * stride + i] : 0;
      ASSERT_EQ(PackedAt(dst.data(), 64, col, i), want) << "col " << col << " i " << i;
    }
  }
  // PackColumns: column e = element e of each row (k_valid 20 rows -> k 32).
  std::vector<uint16_t> dst_t(TileBf16Matrix::PanelElements(width, 32), 0xFFFF);
  TileBf16Matrix::PackColumns(m.data(), stride, width, rows, 32, dst_t.data());
  for (int64_t e = 0; e < 48; ++e) {
    for (int64_t r = 0; r < 32; ++r) {
      const uint16_t want = e < width && r < rows ? m[r * stride + e] : 0;
      ASSERT_EQ(PackedAt(dst_t.data(), 32, e, r), want) << "col " << e << " k " << r;
    }
  }
}

// The ISA's packing kernels write exactly what the reference packing writes, on odd sizes,
// odd k_valid and a row stride longer than the rows.
void CheckPackKernelsEqualTheReference(const kernels::KernelTable* kt) {
  ASSERT_NE(kt->tile_pack_rows, nullptr);
  ASSERT_NE(kt->tile_pack_columns, nullptr);
  struct Shape { int64_t n, k_valid, k; };
  for (const Shape s : {Shape{1, 1, 32}, Shape{16, 64, 64}, Shape{17, 63, 64}, Shape{40, 72, 96},
                        Shape{1024, 64, 64}, Shape{33, 577, 608}}) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " k_valid=" + std::to_string(s.k_valid));
    // PackRows reads n rows of k_valid values; PackColumns k_valid rows of n values.
    const int64_t stride = std::max(s.n, s.k_valid) + 7;
    const int64_t rows = std::max(s.n, s.k_valid);
    const std::vector<uint16_t> src =
        ToBf16(vlmd::testing::RandomNormal(static_cast<size_t>(rows * stride), 31));
    const size_t size = TileBf16Matrix::PanelElements(s.n, s.k);
    std::vector<uint16_t> want(size, 0xABCD), got(size, 0x1234);
    TileBf16Matrix::PackRows(src.data(), stride, s.n, s.k_valid, s.k, want.data());
    kt->tile_pack_rows(src.data(), stride, s.n, s.k_valid, s.k, got.data());
    EXPECT_EQ(got, want) << "rows";
    std::fill(want.begin(), want.end(), 0xABCD);
    std::fill(got.begin(), got.end(), 0x1234);
    TileBf16Matrix::PackColumns(src.data(), stride, s.n, s.k_valid, s.k, want.data());
    kt->tile_pack_columns(src.data(), stride, s.n, s.k_valid, s.k, got.data());
    EXPECT_EQ(got, want) << "columns";
  }
}

TEST(TileBf16Kernel, PackKernelsEqualTheReference) {
  const auto has = [](const kernels::KernelTable& t) { return t.tile_pack_rows != nullptr; };
  if (!ForEachTableWith(has, CheckPackKernelsEqualTheReference)) {
    GTEST_SKIP() << "no table of this CPU has the SIMD tile packing";
  }
}

// TileMatMul refuses what the kernel cannot do safely, and runs the rest like the kernel.
TEST(TileBf16Kernel, TileMatMulValidatesItsArguments) {
  const kernels::KernelTable* kt = TileTable();
  if (kt == nullptr) GTEST_SKIP() << "no AMX tile kernel on this CPU";
  const int64_t m = 20, n = 24, k = 40;  // k padded to 64
  const std::vector<float> wf = vlmd::testing::RandomNormal(n * k, 51);
  auto tm = TileBf16Matrix::Pack(DType::kF32, wf.data(), k * 4, n, k);
  ASSERT_TRUE(tm.ok());
  const int64_t lda = 64;
  std::vector<float> af = vlmd::testing::RandomNormal(32 * lda, 52);
  for (int64_t r = 0; r < 32; ++r) {
    for (int64_t c = k; c < lda; ++c) af[r * lda + c] = 0.0f;  // the padding columns are zero
  }
  const std::vector<uint16_t> a = ToBf16(af);
  std::vector<float> out(static_cast<size_t>(m * n)), want(out.size());
  std::vector<uint16_t> out16(static_cast<size_t>(m * n));
  ThreadPool pool(2);
  auto invalid = [](const Status& s) { return s.code() == StatusCode::kInvalidArgument; };
  TileBf16Args args{.a = a.data(), .lda = lda, .out = out.data(), .ldo = n};
  ASSERT_TRUE(ops::TileMatMul(*kt, &pool, **tm, args, m).ok());
  TileBf16Args ref = args;
  ref.w = (*tm)->data();
  ref.n = n;
  ref.k = (*tm)->k_padded();
  ref.out = want.data();
  kernels::TileBf16MatmulRef(ref, 0, m, 0, (*tm)->panels());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-3) << i;
  EXPECT_TRUE(ops::TileMatMul(*kt, &pool, **tm, args, 0).ok());  // nothing to do
  EXPECT_TRUE(invalid(ops::TileMatMul(*kt, &pool, **tm, args, -1)));
  TileBf16Args bad = args;
  bad.lda = k;  // shorter than the padded rows the kernel reads
  EXPECT_TRUE(invalid(ops::TileMatMul(*kt, &pool, **tm, bad, m)));
  bad = args;
  bad.ldo = n - 1;
  EXPECT_TRUE(invalid(ops::TileMatMul(*kt, &pool, **tm, bad, m)));
  bad = args;
  bad.out = nullptr;
  EXPECT_TRUE(invalid(ops::TileMatMul(*kt, &pool, **tm, bad, m)));
  bad = args;
  bad.out_bf16 = out16.data();
  bad.ldo_bf16 = n;
  bad.accumulate = true;
  EXPECT_TRUE(invalid(ops::TileMatMul(*kt, &pool, **tm, bad, m)));
  bad.accumulate = false;
  EXPECT_TRUE(ops::TileMatMul(*kt, &pool, **tm, bad, m).ok());
  for (size_t i = 0; i < out16.size(); ++i) {
    ASSERT_NEAR(BF16ToF32(out16[i]), want[i], std::fabs(want[i]) * 0x1p-8 + 1e-3) << i;
  }
  const kernels::KernelTable& ref_table = kernels::GetKernelTable(kernels::Isa::kRef);
  EXPECT_EQ(ops::TileMatMul(ref_table, &pool, **tm, args, m).code(), StatusCode::kUnimplemented);
}

// Every x86 SIMD table runs the vision encoder's and a prompt's attention on the flash kernel of
// bf16 operands (FMAs without AVX512-BF16, vdpbf16ps with it, tiles on AMX) and converts rows with
// SIMD kernels, not the scalar reference; VNNI adds vpdpbusd products over plain AVX-512's.
TEST(TileBf16Kernel, EveryX86SimdTableHasTheBf16AttentionPath) {
  const kernels::KernelTable& ref = kernels::GetKernelTable(kernels::Isa::kRef);
  EXPECT_EQ(ref.tile_attention, nullptr);  // the engine then takes the f32 attention paths
  bool ran = false;
  for (auto isa : {kernels::Isa::kAvx2, kernels::Isa::kAvxVnni, kernels::Isa::kAvx512,
                   kernels::Isa::kAvx512Vnni, kernels::Isa::kAvx512Bf16, kernels::Isa::kAmx}) {
    if (!kernels::IsaAvailable(isa)) continue;
    const kernels::KernelTable& kt = kernels::GetKernelTable(isa);
    SCOPED_TRACE(std::string(kernels::IsaName(isa)));
    EXPECT_NE(kt.tile_attention, nullptr);
    EXPECT_NE(kt.to_bf16, ref.to_bf16);
    EXPECT_NE(kt.f16_to_bf16, nullptr);
    EXPECT_NE(kt.tile_pack_rows, nullptr);
    EXPECT_NE(kt.tile_pack_columns, nullptr);
    ran = true;
  }
  if (!ran) GTEST_SKIP() << "no AVX2 on this CPU";
  if (kernels::IsaAvailable(kernels::Isa::kAvxVnni)) {  // AVX-VNNI changes the int8 products only
    EXPECT_EQ(kernels::GetKernelTable(kernels::Isa::kAvxVnni).tile_attention,
              kernels::GetKernelTable(kernels::Isa::kAvx2).tile_attention);
  }
  if (!kernels::IsaAvailable(kernels::Isa::kAvx512)) return;
  const kernels::KernelTable& plain = kernels::GetKernelTable(kernels::Isa::kAvx512);
  EXPECT_NE(plain.tile_attention, kernels::GetKernelTable(kernels::Isa::kAvx2).tile_attention);
  if (kernels::IsaAvailable(kernels::Isa::kAvx512Vnni)) {
    const kernels::KernelTable& vnni = kernels::GetKernelTable(kernels::Isa::kAvx512Vnni);
    EXPECT_NE(vnni.packed_matmul, plain.packed_matmul);
    EXPECT_EQ(vnni.tile_attention, plain.tile_attention);
  }
  if (kernels::IsaAvailable(kernels::Isa::kAvx512Bf16)) {
    const kernels::KernelTable& bf16 = kernels::GetKernelTable(kernels::Isa::kAvx512Bf16);
    EXPECT_NE(bf16.tile_attention, plain.tile_attention);
    EXPECT_NE(bf16.to_bf16, plain.to_bf16);
  }
}

// Every aarch64 table runs the encoder's and a prompt's attention on the NEON flash kernel (the
// same for all three: only the int8 products differ) and converts rows with NEON, not the scalar
// reference; the x86 tables run their own kernels.
TEST(TileBf16Kernel, EveryArm64TableHasTheNeonAttentionPath) {
  const kernels::KernelTable& ref = kernels::GetKernelTable(kernels::Isa::kRef);
  const kernels::KernelTable* first = nullptr;
  for (auto isa : {kernels::Isa::kNeon, kernels::Isa::kNeonDot, kernels::Isa::kNeonI8mm}) {
    if (!kernels::IsaAvailable(isa)) continue;
    const kernels::KernelTable& kt = kernels::GetKernelTable(isa);
    SCOPED_TRACE(std::string(kernels::IsaName(isa)));
    EXPECT_NE(kt.tile_attention, nullptr);
    EXPECT_NE(kt.to_bf16, ref.to_bf16);
    EXPECT_NE(kt.f16_to_bf16, nullptr);
    if (first == nullptr) {
      first = &kt;
    } else {
      EXPECT_EQ(kt.tile_attention, first->tile_attention);
    }
  }
  if (first == nullptr) GTEST_SKIP() << "not an aarch64 CPU";
}

TEST(TileBf16Kernel, MatchesTheReferenceOnOddShapesAndRanges) {
  const kernels::KernelTable* kt = TileTable();
  if (kt == nullptr) GTEST_SKIP() << "no AMX tile kernel on this CPU";
  struct Shape { int64_t m, n, k; };
  for (const Shape s : {Shape{1, 16, 32}, Shape{15, 5, 64}, Shape{17, 40, 96}, Shape{33, 49, 800},
                        Shape{70, 64, 256}, Shape{100, 33, 1024}}) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                 " k=" + std::to_string(s.k));
    const int64_t m_pad = (s.m + 15) / 16 * 16;
    std::vector<float> af = vlmd::testing::RandomNormal(m_pad * s.k, 11);
    for (int64_t i = s.m * s.k; i < m_pad * s.k; ++i) af[i] = 0.0f;
    const std::vector<uint16_t> a = ToBf16(af);
    const std::vector<float> wf = vlmd::testing::RandomNormal(s.n * s.k, 12);
    auto tm = TileBf16Matrix::Pack(DType::kF32, wf.data(), s.k * 4, s.n, s.k);
    ASSERT_TRUE(tm.ok());
    const int64_t ldo = s.n + 3;  // columns n..ldo-1 must stay untouched
    for (bool accumulate : {false, true}) {
      std::vector<float> got(static_cast<size_t>(s.m * ldo), 0.5f);
      std::vector<float> want = got;
      TileBf16Args args{a.data(), s.k, (*tm)->data(), s.n, s.k, got.data(), ldo, accumulate};
      // Two calls over split row and panel ranges must cover the matrix like one.
      const int64_t m_split = s.m > 16 ? 16 : s.m, panels = (*tm)->panels();
      kt->tile_bf16_matmul(args, 0, m_split, 0, panels);
      kt->tile_bf16_matmul(args, m_split, s.m, 0, panels / 2);
      kt->tile_bf16_matmul(args, m_split, s.m, panels / 2, panels);
      args.out = want.data();
      kernels::TileBf16MatmulRef(args, 0, s.m, 0, panels);
      for (int64_t r = 0; r < s.m; ++r) {
        for (int64_t c = 0; c < ldo; ++c) {
          const size_t i = static_cast<size_t>(r * ldo + c);
          if (c >= s.n) {
            ASSERT_EQ(got[i], 0.5f) << "wrote past n at row " << r;
            continue;
          }
          double abs_sum = accumulate ? 0.5 : 0.0;
          for (int64_t e = 0; e < s.k; ++e) {
            abs_sum += std::fabs(BF16ToF32(a[r * s.k + e]) *
                                 BF16ToF32(PackedAt((*tm)->data(), s.k, c, e)));
          }
          // Both sum the same exact products in f32, in different orders.
          const double tol = 2.0 * (s.k + 2) * vlmd::testing::kU * abs_sum + 1e-30;
          ASSERT_NEAR(got[i], want[i], tol) << "row " << r << " col " << c;
        }
      }
    }
  }
}

// The epilogue (scale, bias, activation; accumulation or bf16 output) equals the
// reference's on the same operands: the sums differ only in order, so the results agree within
// that rounding (carried through the activation, slope < 1.2) and, for bf16 outputs, one bf16
// step of the value.
TEST(TileBf16Kernel, EpilogueMatchesTheReference) {
  const kernels::KernelTable* kt = TileTable();
  if (kt == nullptr) GTEST_SKIP() << "no AMX tile kernel on this CPU";
  struct Shape { int64_t m, n, k; };
  enum class Mode { kScaleBiasAct, kBiasAccumulate, kBf16Out };
  // {50, 40, 2048}: a block's epilogue spread a row per k step over the next block, which has
  // one panel at the edge.
  for (const Shape s : {Shape{33, 49, 96}, Shape{70, 64, 256}, Shape{5, 16, 32}, Shape{50, 40, 2048}}) {
    const int64_t m_pad = (s.m + 15) / 16 * 16;
    std::vector<float> af = vlmd::testing::RandomNormal(m_pad * s.k, 21);
    const std::vector<uint16_t> a = ToBf16(af);
    const std::vector<float> wf = vlmd::testing::RandomNormal(s.n * s.k, 22);
    auto tm = TileBf16Matrix::Pack(DType::kF32, wf.data(), s.k * 4, s.n, s.k);
    ASSERT_TRUE(tm.ok());
    const std::vector<float> bias = vlmd::testing::RandomNormal(s.n, 23);
    for (Mode mode : {Mode::kScaleBiasAct, Mode::kBiasAccumulate, Mode::kBf16Out}) {
      SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                   " mode=" + std::to_string(static_cast<int>(mode)));
      const int64_t ldo = s.n + 3;  // columns n..ldo-1 must stay untouched
      std::vector<float> got(static_cast<size_t>(s.m * ldo), 0.5f), want = got;
      std::vector<uint16_t> got16(static_cast<size_t>(s.m * ldo), 0xFFFF), want16 = got16;
      TileBf16Args args{a.data(), s.k, (*tm)->data(), s.n, s.k, got.data(), ldo};
      args.bias = bias.data();
      if (mode == Mode::kScaleBiasAct) {
        args.scale = 0.5f;
        args.act = kt->gelu_tanh;
      } else if (mode == Mode::kBiasAccumulate) {
        args.accumulate = true;
      } else {
        args.act = kt->gelu_tanh;
        args.out_bf16 = got16.data();
        args.ldo_bf16 = ldo;
      }
      kt->tile_bf16_matmul(args, 0, s.m, 0, (*tm)->panels());
      args.out = want.data();
      if (args.out_bf16 != nullptr) args.out_bf16 = want16.data();
      kernels::TileBf16MatmulRef(args, 0, s.m, 0, (*tm)->panels());
      for (int64_t r = 0; r < s.m; ++r) {
        for (int64_t c = 0; c < ldo; ++c) {
          const size_t i = static_cast<size_t>(r * ldo + c);
          if (c >= s.n) {
            ASSERT_EQ(got[i], 0.5f) << "wrote past n at row " << r;
            ASSERT_EQ(got16[i], 0xFFFF) << "wrote past n at row " << r;
            continue;
          }
          double abs_sum = 0.0;
          for (int64_t e = 0; e < s.k; ++e) {
            abs_sum += std::fabs(BF16ToF32(a[r * s.k + e]) *
                                 BF16ToF32(PackedAt((*tm)->data(), s.k, c, e)));
          }
          const double f = mode == Mode::kScaleBiasAct ? 0.5 : 1.0;
          const double tol = 1.2 * (2.0 * (s.k + 2) * vlmd::testing::kU * abs_sum * f +
                                    4.0 * vlmd::testing::kU * (std::fabs(bias[c]) + 1.0));
          if (mode == Mode::kBf16Out) {
            ASSERT_EQ(got[i], 0.5f) << "the f32 output was written in bf16 mode";
            const double w = BF16ToF32(want16[i]);
            ASSERT_NEAR(BF16ToF32(got16[i]), w, tol + std::ldexp(std::fabs(w), -7))
                << "row " << r << " col " << c;
          } else {
            ASSERT_NEAR(got[i], want[i], tol) << "row " << r << " col " << c;
          }
        }
      }
    }
  }
}

// k = 72 is not a whole tile step: weights and activations are padded with zeros.
class TileMatMulTest : public ::testing::TestWithParam<int64_t> {};
INSTANTIATE_TEST_SUITE_P(K, TileMatMulTest, ::testing::Values(160, 72));

TEST_P(TileMatMulTest, MatMulOnTileWeightsStaysWithinBf16RoundingOfF32) {
  const kernels::KernelTable* kt = TileTable();
  if (kt == nullptr) GTEST_SKIP() << "no AMX tile kernel on this CPU";
  const int64_t m = 45, n = 70, k = GetParam();
  const std::vector<float> a = vlmd::testing::RandomNormal(m * k, 21);
  const std::vector<float> w = vlmd::testing::RandomNormal(n * k, 22);
  std::vector<uint16_t> w16(static_cast<size_t>(n * k));
  F32ToF16Row(w.data(), w16.data(), n * k);
  ops::WeightView view{DType::kF16, n, k, w16.data(), 0};
  ops::PackedStore store;
  ops::WeightPacking exact{kt, ops::Precision::kExact, true};
  ASSERT_TRUE(ops::PackWeight(exact, &view, &store).ok());
  EXPECT_EQ(view.tiles, nullptr) << "exact precision must not round weights to bf16";
  if (k % 32 == 0) {  // Q8_0 in exact precision keeps its exact int8 repack, never bf16 tiles.
    std::vector<uint8_t> q8(*RowBytes(DType::kQ8_0, k) * n);
    for (int64_t r = 0; r < n; ++r) {
      ASSERT_TRUE(QuantizeRow(DType::kQ8_0, w.data() + r * k,
                              q8.data() + r * *RowBytes(DType::kQ8_0, k), k).ok());
    }
    ops::WeightView q8_view{DType::kQ8_0, n, k, q8.data(), 0};
    ops::PackedStore q8_store;
    ASSERT_TRUE(ops::PackWeight(exact, &q8_view, &q8_store).ok());
    EXPECT_EQ(q8_view.tiles, nullptr);
    EXPECT_EQ(q8_view.packed != nullptr, kt->packed_matmul != nullptr);
  }
  ops::WeightPacking fast{kt, ops::Precision::kFast, true};
  ASSERT_TRUE(ops::PackWeight(fast, &view, &store).ok());
  ASSERT_NE(view.tiles, nullptr);
  EXPECT_EQ(view.packed, nullptr);
  EXPECT_EQ(ops::PackedBytes(store), view.tiles->bytes());
  std::vector<float> out(static_cast<size_t>(m * n));
  ops::MatmulScratch scratch;
  ASSERT_TRUE(ops::MatMul(*kt, nullptr, view, a.data(), m, k, out.data(), n, &scratch).ok());
  // Each product has relative error <= 2 * 2^-9 (both operands rounded to bf16): the error of
  // output (r, c) is at most ~2^-8 * sum |a w|.
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double exact_sum = 0.0, abs_sum = 0.0;
      for (int64_t e = 0; e < k; ++e) {
        const double t = static_cast<double>(a[r * k + e]) * F16ToF32(w16[c * k + e]);
        exact_sum += t;
        abs_sum += std::fabs(t);
      }
      ASSERT_NEAR(out[r * n + c], exact_sum, 0x1p-8 * abs_sum + 1e-6) << r << "," << c;
    }
  }
}

// MatMulShared converts the activations once for all tile weights: the outputs equal separate
// MatMul calls bit for bit, on the tile path and on the fallback (weights without tiles).
TEST(TileBf16Kernel, MatMulSharedEqualsSeparateMatMuls) {
  const kernels::KernelTable* kt = TileTable();
  if (kt == nullptr) GTEST_SKIP() << "no AMX tile kernel on this CPU";
  const int64_t m = 37, k = 96;
  const std::vector<float> a = vlmd::testing::RandomNormal(m * k, 31);
  std::vector<std::vector<float>> wf;
  std::vector<ops::WeightView> views;
  for (int64_t n : {16, 50, 33}) {
    wf.push_back(vlmd::testing::RandomNormal(n * k, 40 + static_cast<uint32_t>(n)));
    views.push_back(ops::WeightView{DType::kF32, n, k, wf.back().data(), 0});
  }
  for (bool tiles : {true, false}) {
    SCOPED_TRACE(tiles ? "tiles" : "fallback");
    std::vector<ops::WeightView> ws = views;
    ops::PackedStore store;
    ops::WeightPacking packing{kt, ops::Precision::kFast, tiles};
    for (auto& w : ws) ASSERT_TRUE(ops::PackWeight(packing, &w, &store).ok());
    ASSERT_EQ(ws[0].tiles != nullptr, tiles);
    std::vector<std::vector<float>> shared(3), single(3);
    ops::MatmulScratch scratch;
    const ops::WeightView* wp[3];
    float* outs[3];
    for (int i = 0; i < 3; ++i) {
      shared[i].assign(static_cast<size_t>(m * ws[i].n), 0.0f);
      single[i].assign(static_cast<size_t>(m * ws[i].n), 1.0f);
      wp[i] = &ws[i];
      outs[i] = shared[i].data();
      ASSERT_TRUE(ops::MatMul(*kt, nullptr, ws[i], a.data(), m, k, single[i].data(), ws[i].n,
                              &scratch).ok());
    }
    ASSERT_TRUE(ops::MatMulShared(*kt, nullptr, wp, a.data(), m, k, outs, &scratch).ok());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(shared[i], single[i]) << "weight " << i;
  }
  // Weights of different k cannot share activations.
  ops::WeightView other{DType::kF32, 16, 64, wf[0].data(), 0};
  const ops::WeightView* mixed[2] = {&views[0], &other};
  std::vector<float> o1(static_cast<size_t>(m * 16)), o2(static_cast<size_t>(m * 16));
  float* mixed_out[2] = {o1.data(), o2.data()};
  ops::MatmulScratch scratch;
  EXPECT_FALSE(ops::MatMulShared(*kt, nullptr, mixed, a.data(), m, k, mixed_out, &scratch).ok());
}

// The epilogue (bias, then activation) equals the same steps applied after a plain MatMul, on
// the tile path (block by block) and on the row-layout path (one pass after the product).
TEST(MatmulEpilogue, EqualsBiasThenActivationAfterTheProduct) {
  const kernels::KernelTable& best = kernels::GetKernelTable(kernels::BestAvailableIsa());
  const int64_t m = 45, n = 150, k = 64;  // n: several 128-column task blocks and an edge
  const std::vector<float> a = vlmd::testing::RandomNormal(m * k, 51);
  const std::vector<float> w = vlmd::testing::RandomNormal(n * k, 52);
  const std::vector<float> bias = vlmd::testing::RandomNormal(n, 53);
  for (bool tiles : {false, true}) {
    SCOPED_TRACE(tiles ? "tiles" : "rows");
    const kernels::KernelTable* kt = tiles ? TileTable() : &best;
    if (kt == nullptr) continue;  // no AMX: the row path above was the test
    ops::WeightView view{DType::kF32, n, k, w.data(), 0};
    ops::PackedStore store;
    if (tiles) {
      ASSERT_TRUE(ops::PackWeight({kt, ops::Precision::kFast, true}, &view, &store).ok());
    }
    ops::MatmulScratch scratch;
    std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
    ASSERT_TRUE(ops::MatMul(*kt, nullptr, view, a.data(), m, k, want.data(), n, &scratch).ok());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) want[r * n + c] += bias[c];
      kt->gelu_tanh(want.data() + r * n, want.data() + r * n, n);
    }
    const ops::MatmulEpilogue ep{bias.data(), kt->gelu_tanh};
    ThreadPool pool(2);
    ASSERT_TRUE(
        ops::MatMul(*kt, &pool, view, a.data(), m, k, got.data(), n, &scratch, &ep).ok());
    for (size_t i = 0; i < got.size(); ++i) {
      // The activation is elementwise, so only the product's split may differ: none here.
      ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << "element " << i;
    }
  }
}

// The residual part of the epilogue (a residual stream x + W a written to a second buffer) on
// every path: plain rows, packed int8 panels (added per range while the outputs are in cache)
// and bf16 tiles; one row (GEMV) and many (GEMM), over a pool. Equal to the product plus bias,
// activation and residual applied afterwards; a residual stride below n is refused.
TEST(MatmulEpilogue, ResidualIsAddedOnEveryPath) {
  const kernels::KernelTable& best = kernels::GetKernelTable(kernels::BestAvailableIsa());
  const int64_t n = 150, k = 64, ld_res = 160;
  const std::vector<float> w = vlmd::testing::RandomNormal(n * k, 62);
  const std::vector<float> bias = vlmd::testing::RandomNormal(n, 63);
  enum class Path { kRows, kPacked, kTiles };
  for (Path path : {Path::kRows, Path::kPacked, Path::kTiles}) {
    const kernels::KernelTable* kt = path == Path::kTiles ? TileTable() : &best;
    if (kt == nullptr) continue;  // no AMX
    if (path == Path::kPacked && kt->packed_matmul == nullptr) continue;
    for (int64_t m : {int64_t{1}, int64_t{45}}) {
      SCOPED_TRACE(std::string(path == Path::kRows ? "rows" : path == Path::kPacked ? "packed" : "tiles") +
                   " m=" + std::to_string(m));
      const std::vector<float> a = vlmd::testing::RandomNormal(m * k, 60 + m);
      const std::vector<float> res = vlmd::testing::RandomNormal(m * ld_res, 61);
      ops::WeightView view{DType::kF32, n, k, w.data(), 0};
      ops::PackedStore store;
      if (path != Path::kRows) {
        ASSERT_TRUE(ops::PackWeight({kt, ops::Precision::kFast, path == Path::kTiles}, &view,
                                    &store).ok());
        ASSERT_TRUE(path == Path::kTiles ? view.tiles != nullptr : view.packed != nullptr);
      }
      ops::MatmulScratch scratch;
      std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
      ASSERT_TRUE(ops::MatMul(*kt, nullptr, view, a.data(), m, k, want.data(), n, &scratch).ok());
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) want[r * n + c] += bias[c];
        kt->silu(want.data() + r * n, want.data() + r * n, n);
        for (int64_t c = 0; c < n; ++c) want[r * n + c] += res[r * ld_res + c];
      }
      ops::MatmulEpilogue ep{bias.data(), kt->silu};
      ep.residual = res.data();
      ep.ld_residual = ld_res;
      ThreadPool pool(2);
      ASSERT_TRUE(
          ops::MatMul(*kt, &pool, view, a.data(), m, k, got.data(), n, &scratch, &ep).ok());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << "element " << i;
      }
      ep.ld_residual = n - 1;
      EXPECT_FALSE(
          ops::MatMul(*kt, &pool, view, a.data(), m, k, got.data(), n, &scratch, &ep).ok());
    }
  }
}

// The fused kernel's key ranges (kv_first / kv_end): each query sees exactly its keys - a
// prompt after a 70-key history, causal (its first rows seeing few keys), every third row also
// cut to a window of its last 37 keys (a range starting inside a chunk; rows late in the prompt
// start past the first chunk), where one key too many or too few moves the output far beyond the
// bf16 tolerance - against attention in double over the range on the same bf16 operands; a
// query with an empty range gets zeros.
void CheckTileAttentionKeyRangesMatchDoubleReference(const kernels::KernelTable* kt) {
  const int64_t n_q = 150, history = 70, n_kv = history + n_q, hd = 64, hd_pad = 64;
  const int64_t v_k = (n_kv + 31) / 32 * 32, q_rows = (n_q + 31) / 32 * 32;
  std::vector<float> qf = vlmd::testing::RandomNormal(q_rows * hd_pad, 81, 0.6f);
  std::fill(qf.begin() + n_q * hd_pad, qf.end(), 0.0f);
  const std::vector<uint16_t> q = ToBf16(qf);
  const std::vector<uint16_t> k = ToBf16(vlmd::testing::RandomNormal(n_kv * hd, 82));
  const std::vector<uint16_t> v = ToBf16(vlmd::testing::RandomNormal(n_kv * hd, 83));
  std::vector<int32_t> first(n_q), end(n_q);
  for (int64_t i = 0; i < n_q; ++i) {
    end[i] = static_cast<int32_t>(history + i + 1);
    first[i] = i % 3 == 1 ? std::max(0, end[i] - 37) : 0;
  }
  first[0] = end[0] = 9;  // an empty range: zeros
  std::vector<uint16_t> k_tiles(TileBf16Matrix::PanelElements(n_kv, hd_pad));
  std::vector<uint16_t> v_tiles(TileBf16Matrix::PanelElements(hd, v_k));
  TileBf16Matrix::PackRows(k.data(), hd, n_kv, hd, hd_pad, k_tiles.data());
  TileBf16Matrix::PackColumns(v.data(), hd, hd, n_kv, v_k, v_tiles.data());
  ops::MatmulScratch o_block;
  std::vector<uint16_t> out(static_cast<size_t>(n_q * hd), 0xABCD);
  kernels::TileAttentionArgs args{
      .q = q.data(), .ldq = hd_pad, .k_tiles = k_tiles.data(), .v_tiles = v_tiles.data(),
      .v_k = v_k, .n_q = n_q, .n_kv = n_kv, .hd = hd, .hd_pad = hd_pad, .out = out.data(),
      .ldo = hd,
      .o_scratch = reinterpret_cast<float*>(
          o_block.Reserve(static_cast<size_t>(32 * (hd_pad + 16)) * sizeof(float)))};
  args.kv_first = first.data();
  args.kv_end = end.data();
  kt->tile_attention(args);
  double v_max = 0.0;
  for (uint16_t x : v) v_max = std::max(v_max, std::fabs(static_cast<double>(BF16ToF32(x))));
  for (int64_t i = 0; i < n_q; ++i) {
    std::vector<double> p;
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = first[i]; j < end[i]; ++j) {
      double dot = 0.0;
      for (int64_t e = 0; e < hd; ++e) {
        dot += static_cast<double>(BF16ToF32(q[i * hd_pad + e])) * BF16ToF32(k[j * hd + e]);
      }
      p.push_back(dot);
      m = std::max(m, dot);
    }
    for (double& x : p) sum += x = std::exp2(x - m);
    for (int64_t e = 0; e < hd; ++e) {
      double want = 0.0;
      for (size_t j = 0; j < p.size(); ++j) want += p[j] * BF16ToF32(v[(first[i] + j) * hd + e]);
      if (!p.empty()) want /= sum;
      // As in TileAttentionMatchesDoubleReference: bf16 probabilities and output.
      ASSERT_NEAR(BF16ToF32(out[i * hd + e]), want, 0x1p-7 * v_max + 0x1p-8 * std::fabs(want))
          << "row " << i << " col " << e << " (sees keys " << first[i] << ".." << end[i] << ")";
    }
  }
}

TEST(TileBf16Kernel, TileAttentionKeyRangesMatchDoubleReference) {
  const auto has = [](const kernels::KernelTable& t) { return t.tile_attention != nullptr; };
  if (!ForEachTableWith(has, CheckTileAttentionKeyRangesMatchDoubleReference)) {
    GTEST_SKIP() << "no table of this CPU has a bf16 attention kernel";
  }
}

// Packed int8 weights in fast precision on the tile unit (ops::MatMul from 32 rows): equal to the
// tile reference over the same operands - the activations rounded to bf16 and the packed
// weights' bf16 tiles (PackedToTilesRef) - within the f32 summation order, for every packed
// format, 64 rows (tasks of one panel) and 600 rows (10 row blocks, the last one partial, of all
// 11 panels), a last panel 10 columns wide, one thread and two; and the epilogue (bias, SiLU,
// residual) is applied to exactly that product.
TEST(TileBf16Kernel, PackedWeightsOnTilesEqualTheTileReference) {
  const kernels::KernelTable* kt = TileTable();
  if (kt == nullptr || kt->packed_to_tiles == nullptr) GTEST_SKIP() << "no AMX tile kernel";
  const int64_t n = 170, k = 256;
  const std::vector<float> wf = vlmd::testing::RandomNormal(n * k, 71);
  const std::vector<float> bias = vlmd::testing::RandomNormal(n, 72);
  ThreadPool pool(2);
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kF16}) {
    const size_t rb = *RowBytes(type, k);
    std::vector<uint8_t> rows(rb * n);
    ASSERT_TRUE(QuantizeTensor(type, wf.data(), n, k, rows.data()).ok());
    ops::WeightView view{type, n, k, rows.data(), 0};
    ops::PackedStore store;
    ASSERT_TRUE(ops::PackWeight({kt, ops::Precision::kFast}, &view, &store).ok());
    ASSERT_NE(view.packed, nullptr);
    ASSERT_EQ(view.packed_tile_route, ops::PackedTileRoute::kManyRows);
    const int64_t panels = view.packed->panels();
    std::vector<uint16_t> w16(static_cast<size_t>(panels * k * kernels::kPanelCols));
    kernels::PackedToTilesRef(*view.packed, 0, panels, w16.data());
    for (int64_t m : {int64_t{64}, int64_t{600}}) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        SCOPED_TRACE(std::string(DTypeName(type)) + " m=" + std::to_string(m) +
                     (p ? " 2 threads" : " 1 thread"));
        const std::vector<float> af = vlmd::testing::RandomNormal(m * k, 73 + m);
        const std::vector<uint16_t> a16 = ToBf16(af);
        std::vector<float> want(static_cast<size_t>(m * n)), got(want.size());
        TileBf16Args args{a16.data(), k, w16.data(), n, k, want.data(), n};
        kernels::TileBf16MatmulRef(args, 0, m, 0, panels);
        ops::MatmulScratch scratch;
        ASSERT_TRUE(ops::MatMul(*kt, p, view, af.data(), m, k, got.data(), n, &scratch).ok());
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            double abs_sum = 0;
            for (int64_t e = 0; e < k; ++e) {
              abs_sum += std::fabs(BF16ToF32(a16[r * k + e]) *
                                   BF16ToF32(PackedAt(w16.data(), k, c, e)));
            }
            const double tol = 2.0 * (k + 2) * vlmd::testing::kU * abs_sum + 1e-30;
            ASSERT_NEAR(got[r * n + c], want[r * n + c], tol) << "row " << r << " col " << c;
          }
        }
        const std::vector<float> res = vlmd::testing::RandomNormal(m * n, 74);
        ops::MatmulEpilogue ep{bias.data(), kt->silu};
        ep.residual = res.data();
        ep.ld_residual = n;
        std::vector<float> with_ep(got.size());
        ASSERT_TRUE(
            ops::MatMul(*kt, p, view, af.data(), m, k, with_ep.data(), n, &scratch, &ep).ok());
        for (int64_t r = 0; r < m; ++r) {
          float* row = got.data() + r * n;
          for (int64_t c = 0; c < n; ++c) row[c] += bias[c];
          kt->silu(row, row, n);
          for (int64_t c = 0; c < n; ++c) row[c] += res[r * n + c];
        }
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(with_ep[i], got[i], 1e-5f * (1.0f + std::fabs(got[i]))) << "element " << i;
        }
      }
    }
  }
}

// The fused attention kernel against attention in double over the same bf16 Q, K and V (scores
// in log2 units): within the bf16 rounding of the probabilities and of the output, on odd sizes
// (partial query blocks and key chunks, head_dim 48 / 64 / 72: an odd number of output panels,
// resident and reloaded queries); a row with a NaN query gives NaN, and nothing is written past
// head_dim.
void CheckTileAttentionMatchesDoubleReference(const kernels::KernelTable* kt) {
  ASSERT_NE(kt->tile_attention, nullptr);
  // rising: later keys are longer, so later chunks raise the running max past its reference
  // (the rescale of the partial outputs runs).
  // uniform: q = 0, every score 0, so the output is the plain mean of V's rows (a padding key
  // counted in a row's sum would show as a factor n_kv / n_padded).
  // leap: the keys from 200 on are 60x longer, so their chunks' scores exceed the running max by
  // far more than f32's exponent range: terms taken against the old reference would overflow
  // (the one-pass softmax must notice and move it).
  // late_nan: key 150 (the second chunk, after every row has its reference) holds a NaN, so every
  // row's output is NaN, as when the NaN comes first.
  struct Shape {
    int64_t n_q, n_kv, hd;
    bool rising, uniform = false, leap = false, late_nan = false;
  };
  for (const Shape s : {Shape{40, 200, 64, false}, Shape{33, 129, 48, false},
                        Shape{64, 256, 72, false}, Shape{5, 17, 64, false},
                        Shape{100, 300, 64, false}, Shape{40, 640, 64, true},
                        Shape{20, 17, 64, false, true}, Shape{8, 145, 48, false, true},
                        Shape{37, 150, 20, false}, Shape{9, 70, 36, false},
                        Shape{40, 400, 64, false, false, true},
                        Shape{40, 300, 64, false, false, false, true}}) {
    SCOPED_TRACE("n_q=" + std::to_string(s.n_q) + " n_kv=" + std::to_string(s.n_kv) +
                 " hd=" + std::to_string(s.hd) + (s.rising ? " rising" : "") +
                 (s.uniform ? " uniform" : "") + (s.leap ? " leap" : "") +
                 (s.late_nan ? " late_nan" : ""));
    const int64_t hd_pad = (s.hd + 31) / 32 * 32, v_k = (s.n_kv + 31) / 32 * 32;
    const int64_t q_rows = (s.n_q + 31) / 32 * 32;
    std::vector<float> qf = vlmd::testing::RandomNormal(q_rows * hd_pad, 71, 0.6f);
    for (int64_t i = 0; i < q_rows; ++i) {
      for (int64_t e = 0; e < hd_pad; ++e) {
        if (i >= s.n_q || e >= s.hd) qf[i * hd_pad + e] = 0.0f;
      }
    }
    if (s.uniform) std::fill(qf.begin(), qf.end(), 0.0f);
    const bool nan_row = s.n_q > 3 && !s.uniform;
    if (nan_row) qf[3 * hd_pad + 1] = NAN;
    const std::vector<uint16_t> q = ToBf16(qf);
    std::vector<float> kf = vlmd::testing::RandomNormal(s.n_kv * s.hd, 72);
    if (s.rising) {
      for (int64_t j = 0; j < s.n_kv; ++j) {
        for (int64_t e = 0; e < s.hd; ++e) kf[j * s.hd + e] *= 1.0f + 6.0f * j / s.n_kv;
      }
    }
    if (s.leap) {
      for (int64_t i = 200 * s.hd; i < s.n_kv * s.hd; ++i) kf[i] *= 60.0f;
    }
    if (s.late_nan) kf[150 * s.hd + 5] = NAN;
    const std::vector<uint16_t> k = ToBf16(kf);
    const std::vector<uint16_t> v = ToBf16(vlmd::testing::RandomNormal(s.n_kv * s.hd, 73));
    std::vector<uint16_t> k_tiles(TileBf16Matrix::PanelElements(s.n_kv, hd_pad));
    std::vector<uint16_t> v_tiles(TileBf16Matrix::PanelElements(s.hd, v_k));
    TileBf16Matrix::PackRows(k.data(), s.hd, s.n_kv, s.hd, hd_pad, k_tiles.data());
    TileBf16Matrix::PackColumns(v.data(), s.hd, s.hd, s.n_kv, v_k, v_tiles.data());
    ops::MatmulScratch o_block;
    const int64_t ldo = s.hd + 5;
    std::vector<uint16_t> out(static_cast<size_t>(s.n_q * ldo), 0xABCD);
    const kernels::TileAttentionArgs args{
        .q = q.data(), .ldq = hd_pad, .k_tiles = k_tiles.data(), .v_tiles = v_tiles.data(),
        .v_k = v_k, .n_q = s.n_q, .n_kv = s.n_kv, .hd = s.hd, .hd_pad = hd_pad,
        .out = out.data(), .ldo = ldo,
        .o_scratch = reinterpret_cast<float*>(
            o_block.Reserve(static_cast<size_t>(32 * (hd_pad + 16)) * sizeof(float)))};
    kt->tile_attention(args);
    double v_max = 0.0;
    for (uint16_t x : v) v_max = std::max(v_max, std::fabs(static_cast<double>(BF16ToF32(x))));
    std::vector<double> p(static_cast<size_t>(s.n_kv));
    for (int64_t i = 0; i < s.n_q; ++i) {
      for (int64_t c = s.hd; c < ldo; ++c) ASSERT_EQ(out[i * ldo + c], 0xABCD) << "row " << i;
      if ((nan_row && i == 3) || s.late_nan) {
        for (int64_t e = 0; e < s.hd; ++e) EXPECT_TRUE(std::isnan(BF16ToF32(out[i * ldo + e])));
        continue;
      }
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < s.n_kv; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < s.hd; ++e) {
          dot += static_cast<double>(BF16ToF32(q[i * hd_pad + e])) * BF16ToF32(k[j * s.hd + e]);
        }
        p[j] = dot;
        m = std::max(m, dot);
      }
      for (int64_t j = 0; j < s.n_kv; ++j) sum += p[j] = std::exp2(p[j] - m);
      for (int64_t e = 0; e < s.hd; ++e) {
        double want = 0.0;
        for (int64_t j = 0; j < s.n_kv; ++j) want += p[j] * BF16ToF32(v[j * s.hd + e]);
        want /= sum;
        // Probabilities rounded to bf16 (2^-9 relative each, so at most 2^-9 max|v| in the
        // weighted mean) and the output rounded to bf16 (2^-9 of |want|), with margin.
        ASSERT_NEAR(BF16ToF32(out[i * ldo + e]), want, 0x1p-7 * v_max + 0x1p-8 * std::fabs(want))
            << "row " << i << " col " << e;
      }
    }
  }
}

TEST(TileBf16Kernel, TileAttentionMatchesDoubleReference) {
  const auto has = [](const kernels::KernelTable& t) { return t.tile_attention != nullptr; };
  if (!ForEachTableWith(has, CheckTileAttentionMatchesDoubleReference)) {
    GTEST_SKIP() << "no table of this CPU has a bf16 attention kernel";
  }
}

}  // namespace
}  // namespace vlmd::engine
