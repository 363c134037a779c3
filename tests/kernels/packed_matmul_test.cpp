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

namespace vlmd::engine {
namespace {

using kernels::Isa;
using kernels::KernelTable;
using kernels::PackedMatrix;

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale = 1.0f) {
  return vlmd::testing::RandomNormal(static_cast<size_t>(n), seed, scale);
}

std::vector<uint8_t> Rows(DType type, const std::vector<float>& x, int64_t rows, int64_t k) {
  const size_t rb = *RowBytes(type, k);
  std::vector<uint8_t> out(rb * rows);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, x.data() + r * k, out.data() + r * rb, k).ok());
  }
  return out;
}

// Weight (col, e) as the packed layout holds it: d * (u - offset).
float PackedWeight(const PackedMatrix& pm, int64_t col, int64_t e) {
  const int64_t p = col / kernels::kPanelCols, b = e / 32;
  const int j = static_cast<int>(col % kernels::kPanelCols), i = static_cast<int>(e % 32);
  const uint8_t* qs = pm.qs(p, b);
  int u;
  if (kernels::HasNibbles(pm.format())) {
    const uint8_t byte = qs[(i / 8) * 64 + j * 4 + i % 4];
    u = (i % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
  } else {
    u = qs[(i / 4) * 64 + j * 4 + i % 4];
  }
  if (pm.format() == kernels::PackedFormat::kQ4K) {
    return F16ToF32(pm.scales(p, b)[j]) * static_cast<float>(u) - F16ToF32(pm.mins(p, b)[j]);
  }
  if (pm.format() == kernels::PackedFormat::kQ8Col) {
    return pm.column_scales(p)[j] * static_cast<float>(u - pm.offset());
  }
  return F16ToF32(pm.scales(p, b)[j]) * static_cast<float>(u - pm.offset());
}

// The values of one float row (k values, zero-padded to whole blocks) as kQ8Col packs them: one
// scale for the row, d = max |x| / 127, q = round half away (x / d).
std::vector<float> ColumnRule(std::vector<float> x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (float& v : x) v = d * std::round(v * id);
  return x;
}

// The values of one row (zero-padded to whole blocks) as Q8_0 blocks hold them.
std::vector<float> BlockRule(std::vector<float> x) {
  std::vector<BlockQ8_0> q8(x.size() / 32);
  quant::QuantizeRowQ8_0(x.data(), q8.data(), static_cast<int64_t>(x.size()));
  quant::DequantizeRowQ8_0(q8.data(), x.data(), static_cast<int64_t>(x.size()));
  return x;
}

// Q5_K and Q6_K (k a multiple of 256) are packed as their values on the Q8 rule; float rows of
// Gaussian values with one scale per column.
TEST(PackedMatrixTest, RepacksIntegerFormatsExactlyAndQuantizesFloatsByTheQ8Rule) {
  const int64_t n = 37;
  const std::vector<std::pair<DType, int64_t>> type_k = {
      {DType::kQ8_0, 96}, {DType::kQ5_0, 96}, {DType::kQ4_0, 96}, {DType::kF16, 96},
      {DType::kBF16, 96}, {DType::kF32, 96},  {DType::kQ5_K, 512}, {DType::kQ6_K, 512}};
  for (const auto& [type, k] : type_k) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const std::vector<float> wf = RandomFloats(n * k, 7);
    const std::vector<uint8_t> rows = Rows(type, wf, n, k);
    auto pm = PackedMatrix::Pack(type, rows.data(), *RowBytes(type, k), n, k);
    ASSERT_TRUE(pm.ok()) << pm.status().ToString();
    EXPECT_EQ((*pm)->panels(), 3);
    const bool float_rows = type == DType::kF16 || type == DType::kBF16 || type == DType::kF32;
    EXPECT_EQ((*pm)->format() == kernels::PackedFormat::kQ8Col, float_rows);
    // What the packed matrix must hold: the GGUF values, or their Q8_0 quantization (Q5_K,
    // Q6_K), or their quantization with one scale per column (float types).
    std::vector<float> want(n * k), row(k);
    for (int64_t c = 0; c < n; ++c) {
      ASSERT_TRUE(DequantizeRow(type, rows.data() + c * *RowBytes(type, k), row.data(), k).ok());
      if (float_rows) {
        row = ColumnRule(row);
      } else if (type != DType::kQ8_0 && type != DType::kQ5_0 && type != DType::kQ4_0) {
        row = BlockRule(row);
      }
      std::copy(row.begin(), row.end(), want.begin() + c * k);
    }
    int bad = 0;
    for (int64_t c = 0; c < n && bad < 5; ++c) {
      for (int64_t e = 0; e < k && bad < 5; ++e) {
        if (PackedWeight(**pm, c, e) != want[c * k + e]) {
          ++bad;
          ADD_FAILURE() << "col " << c << " e " << e << ": " << PackedWeight(**pm, c, e)
                        << " want " << want[c * k + e];
        }
      }
    }
  }
}

// Float rows of a k that is not a multiple of 32 (Qwen2.5-VL's and SigLIP-so400m's FFN widths):
// the zero-padded row quantized by the column rule, whose padding holds zero weights.
TEST(PackedMatrixTest, FloatRowsOfAnyWidthPadTheLastBlockWithZeros) {
  const int64_t n = 19;
  for (DType type : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (int64_t k : {int64_t{1}, int64_t{20}, int64_t{100}}) {
      SCOPED_TRACE(std::string(DTypeName(type)) + " k=" + std::to_string(k));
      const std::vector<float> wf = RandomFloats(n * k, 8);
      const std::vector<uint8_t> rows = Rows(type, wf, n, k);
      auto pm = PackedMatrix::Pack(type, rows.data(), *RowBytes(type, k), n, k);
      ASSERT_TRUE(pm.ok()) << pm.status().ToString();
      const int64_t nb = (k + 31) / 32;
      EXPECT_EQ((*pm)->k(), k);
      EXPECT_EQ((*pm)->blocks(), nb);
      ASSERT_EQ((*pm)->format(), kernels::PackedFormat::kQ8Col);
      std::vector<float> padded(nb * 32);
      for (int64_t c = 0; c < n; ++c) {
        std::fill(padded.begin(), padded.end(), 0.0f);
        ASSERT_TRUE(
            DequantizeRow(type, rows.data() + c * *RowBytes(type, k), padded.data(), k).ok());
        const std::vector<float> want = ColumnRule(padded);
        for (int64_t e = 0; e < nb * 32; ++e) {
          ASSERT_EQ(PackedWeight(**pm, c, e), want[e]) << "col " << c << " e " << e;
          if (e >= k) {
            ASSERT_EQ(PackedWeight(**pm, c, e), 0.0f);
          }
        }
      }
    }
  }
}

// One weight far above the rest of its column would coarsen all of the column under one scale:
// such a matrix keeps Q8_0 blocks (every column of it), as does a fused matrix with a Q8_0 part
// (whose blocks are kept exactly). One column's outlier is enough; rows at the ratio's edge
// (Laplace values) still take column scales.
TEST(PackedMatrixTest, FloatRowsWithAnOutlierKeepBlockScales) {
  const int64_t n = 40, k = 1024;
  std::vector<float> wf = RandomFloats(n * k, 41);
  auto pack_f32 = [&](const std::vector<float>& w) {
    auto pm = PackedMatrix::Pack(DType::kF32, w.data(), k * sizeof(float), n, k);
    EXPECT_TRUE(pm.ok());
    return std::move(*pm);
  };
  EXPECT_EQ(pack_f32(wf)->format(), kernels::PackedFormat::kQ8Col);
  std::vector<float> outlier = wf;
  outlier[23 * k + 500] = 60.0f;  // column 23: 60 sigma
  const auto pm = pack_f32(outlier);
  ASSERT_EQ(pm->format(), kernels::PackedFormat::kQ8);
  for (int64_t c = 0; c < n; ++c) {
    const std::vector<float> want =
        BlockRule(std::vector<float>(outlier.begin() + c * k, outlier.begin() + (c + 1) * k));
    for (int64_t e = 0; e < k; ++e) {
      ASSERT_EQ(PackedWeight(*pm, c, e), want[e]) << "col " << c << " e " << e;
    }
  }
  // Laplace values (ratios up to ~7 in simulation): column scales.
  std::mt19937 rng(5);
  std::exponential_distribution<float> expo(1.0f);
  std::vector<float> laplace(n * k);
  for (float& v : laplace) v = (rng() & 1 ? 1.0f : -1.0f) * expo(rng);
  EXPECT_EQ(pack_f32(laplace)->format(), kernels::PackedFormat::kQ8Col);
  // F16 and Q8_0 fused: the Q8_0 part's blocks are kept.
  const std::vector<uint8_t> f16 = Rows(DType::kF16, wf, n, k);
  const std::vector<uint8_t> q8 = Rows(DType::kQ8_0, wf, n, k);
  const kernels::PackSource sources[] = {
      {DType::kF16, f16.data(), *RowBytes(DType::kF16, k), n},
      {DType::kQ8_0, q8.data(), *RowBytes(DType::kQ8_0, k), n}};
  auto fused = PackedMatrix::PackConcat(sources, k);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ((*fused)->format(), kernels::PackedFormat::kQ8);
}

// Packing on a pool (the engine's load) gives the same bytes as on one thread, for every format,
// a matrix fused from three sources of different lengths (sources meeting inside a panel
// group), a last partial group, and a float k with a padded last block.
TEST(PackedMatrixTest, PackingOnAPoolGivesTheSameBytes) {
  ThreadPool pool(2);
  for (DType type : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0, DType::kQ4_K, DType::kF16}) {
    const int64_t k = type == DType::kQ4_K ? 512 : type == DType::kF16 ? 100 : 96;
    const std::vector<int64_t> lengths = {37, 100, 150};  // 287 columns: 18 panels, 5 groups of 4
    std::vector<std::vector<uint8_t>> rows;
    std::vector<kernels::PackSource> sources;
    for (size_t i = 0; i < lengths.size(); ++i) {
      rows.push_back(Rows(type, RandomFloats(lengths[i] * k, 30 + static_cast<uint32_t>(i)),
                          lengths[i], k));
      sources.push_back({type, rows.back().data(), *RowBytes(type, k), lengths[i]});
    }
    auto serial = PackedMatrix::PackConcat(sources, k);
    auto parallel = PackedMatrix::PackConcat(sources, k, &pool);
    ASSERT_TRUE(serial.ok() && parallel.ok());
    const PackedMatrix& a = **serial;
    const PackedMatrix& b = **parallel;
    ASSERT_EQ(a.panels(), b.panels());
    for (int64_t p = 0; p < a.panels(); ++p) {
      for (int64_t blk = 0; blk < a.blocks(); ++blk) {
        SCOPED_TRACE(std::string(DTypeName(type)) + " panel " + std::to_string(p) + " block " +
                     std::to_string(blk));
        ASSERT_EQ(0, std::memcmp(a.qs(p, blk), b.qs(p, blk), a.qs_bytes_per_block()));
        if (a.format() == kernels::PackedFormat::kQ8Col) {
          ASSERT_EQ(b.format(), kernels::PackedFormat::kQ8Col);
          ASSERT_EQ(0, std::memcmp(a.column_scales(p), b.column_scales(p), 64));
          continue;
        }
        ASSERT_EQ(0, std::memcmp(a.scales(p, blk), b.scales(p, blk), 32));
        if (a.mins(p, blk) != nullptr) {
          ASSERT_EQ(0, std::memcmp(a.mins(p, blk), b.mins(p, blk), 32));
        }
      }
    }
  }
}

// Q4_K keeps its 4-bit quants; scale and min of each 32-value sub-block become f16 products, so
// each packed weight is within f16 rounding of those two terms of the GGUF value.
TEST(PackedMatrixTest, RepacksQ4KQuantsWithF16ScaleAndMin) {
  const int64_t n = 21, k = 512;
  const std::vector<float> wf = RandomFloats(n * k, 17);
  const std::vector<uint8_t> rows = Rows(DType::kQ4_K, wf, n, k);
  const size_t rb = *RowBytes(DType::kQ4_K, k);
  auto pm = PackedMatrix::Pack(DType::kQ4_K, rows.data(), rb, n, k);
  ASSERT_TRUE(pm.ok()) << pm.status().ToString();
  ASSERT_EQ((*pm)->format(), kernels::PackedFormat::kQ4K);
  std::vector<float> row(k);
  int bad = 0;
  for (int64_t c = 0; c < n && bad < 5; ++c) {
    ASSERT_TRUE(DequantizeRow(DType::kQ4_K, rows.data() + c * rb, row.data(), k).ok());
    const auto* blocks = reinterpret_cast<const BlockQ4_K*>(rows.data() + c * rb);
    for (int64_t e = 0; e < k && bad < 5; ++e) {
      // |d sc q - dmin m| terms bound the rounding: 2^-11 relative on each (q <= 15, m <= 63).
      const BlockQ4_K& sb = blocks[e / 256];
      const double term_bound = 15.0 * 63.0 * std::fabs(F16ToF32(sb.d)) +
                                63.0 * std::fabs(F16ToF32(sb.dmin));
      const double tol = term_bound * 0x1p-11 + 1e-30;
      if (!(std::fabs(PackedWeight(**pm, c, e) - row[e]) <= tol)) {
        ++bad;
        ADD_FAILURE() << "col " << c << " e " << e << ": " << PackedWeight(**pm, c, e) << " want "
                      << row[e] << " tol " << tol;
      }
    }
  }
}

TEST(PackedMatrixTest, RefusesWhatItCannotPack) {
  std::vector<uint8_t> buf(4096, 0);
  EXPECT_FALSE(PackedMatrix::Pack(DType::kQ4_1, buf.data(), 160, 2, 256).ok());
  EXPECT_FALSE(PackedMatrix::Pack(DType::kQ6_K, buf.data(), 210, 2, 128).ok());  // k % 256
  EXPECT_FALSE(PackedMatrix::Pack(DType::kQ4_K, buf.data(), 144, 2, 128).ok());  // k % 256
  EXPECT_FALSE(PackedMatrix::Pack(DType::kQ8_0, buf.data(), 34, 2, 40).ok());  // k % 32
  EXPECT_FALSE(PackedMatrix::Pack(DType::kF32, buf.data(), 4 * 40, 2, 0).ok());  // k < 1
  EXPECT_FALSE(PackedMatrix::Pack(DType::kQ8_0, buf.data(), 10, 2, 32).ok());     // row too small
  EXPECT_FALSE(PackedMatrix::Pack(DType::kQ8_0, buf.data(), 34, 0, 32).ok());
}

// A float matrix with an inf (a broken or hostile file) is refused with the row named, not
// quantized into NaN scales and undefined integers.
TEST(PackedMatrixTest, RefusesFloatWeightsThatAreNotFinite) {
  const int64_t n = 40, k = 64;
  std::vector<uint16_t> w(n * k, F32ToF16(0.5f));
  w[33 * k + 7] = 0x7C00;  // f16 +inf in row 33
  auto packed = PackedMatrix::Pack(DType::kF16, w.data(), k * 2, n, k);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(packed.status().message().find("row 33"), std::string::npos)
      << packed.status().message();
  w[33 * k + 7] = F32ToF16(0.5f);
  EXPECT_TRUE(PackedMatrix::Pack(DType::kF16, w.data(), k * 2, n, k).ok());
}

// Fused matrices (q, k, v as one): the error names the source tensor and its own row, not the
// row of the concatenation.
TEST(PackedMatrixTest, NamesTheFusedSourceOfANonFiniteWeight) {
  const int64_t k = 64;
  std::vector<uint16_t> q(16 * k, F32ToF16(0.25f)), kv(8 * k, F32ToF16(0.25f));
  kv[5 * k + 3] = 0xFC00;  // f16 -inf in row 5 of the second source (row 21 of the whole)
  const kernels::PackSource sources[] = {
      {DType::kF16, q.data(), static_cast<size_t>(k * 2), 16, "blk.0.attn_q.weight"},
      {DType::kF16, kv.data(), static_cast<size_t>(k * 2), 8, "blk.0.attn_k.weight"}};
  auto packed = PackedMatrix::PackConcat(sources, k);
  ASSERT_FALSE(packed.ok());
  EXPECT_NE(packed.status().message().find("tensor 'blk.0.attn_k.weight' row 5"),
            std::string::npos)
      << packed.status().message();
}

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
  for (DType type : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const std::vector<uint8_t> rows = Rows(type, RandomFloats(n * k, 3), n, k);
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

// Packed panels as bf16 tile panels (fast-precision GEMMs on the tile unit): the reference holds
// each packed weight (PackedWeight above: d (u - offset), d u - mn) rounded to bf16 at its tile
// position, zeros in padding columns; every ISA's version matches the reference bit for bit,
// for every format and for panel ranges that start inside a group of 4-bit panels.
TEST(PackedMatrixTest, PanelsToBf16TilesMatchTheReference) {
  const int64_t n = 45, k = 256;  // 3 panels, the last one 13 columns wide
  const std::vector<float> wf = RandomFloats(n * k, 61);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const std::vector<uint8_t> rows = Rows(type, wf, n, k);
    auto pm = PackedMatrix::Pack(type, rows.data(), *RowBytes(type, k), n, k);
    ASSERT_TRUE(pm.ok()) << pm.status().ToString();
    const PackedMatrix& w = **pm;
    std::vector<uint16_t> ref(w.panels() * k * kernels::kPanelCols, 0xFFFF);
    kernels::PackedToTilesRef(w, 0, w.panels(), ref.data());
    for (int64_t col = 0; col < w.panels() * kernels::kPanelCols; ++col) {
      const int64_t p = col / kernels::kPanelCols, j = col % kernels::kPanelCols;
      for (int64_t e = 0; e < k; ++e) {
        const uint16_t got =
            ref[(p * k + (e / 2) * 2) * kernels::kPanelCols + j * 2 + e % 2];
        // + 0.0f: a zero weight is +0 in the tiles whatever the sign of its scale.
        const uint16_t want =
            col < n ? F32ToBF16(PackedWeight(w, col, e) + 0.0f) : uint16_t{0};
        ASSERT_EQ(got, want) << "col " << col << " e " << e;
      }
    }
    for (int i = 0; i < kernels::kNumIsas; ++i) {
      const Isa isa = static_cast<Isa>(i);
      if (!kernels::IsaAvailable(isa)) continue;
      const kernels::PackedToTilesFn fn = kernels::GetKernelTable(isa).packed_to_tiles;
      if (fn == nullptr) continue;
      SCOPED_TRACE(std::string(kernels::IsaName(isa)));
      for (int64_t p0 : {int64_t{0}, int64_t{1}}) {
        const size_t panel_elems = static_cast<size_t>(k * kernels::kPanelCols);
        std::vector<uint16_t> got((w.panels() - p0) * panel_elems, 0xFFFF);
        fn(w, p0, w.panels(), got.data());
        ASSERT_EQ(0, std::memcmp(got.data(), ref.data() + p0 * panel_elems,
                                 got.size() * sizeof(uint16_t)))
            << "panels from " << p0;
      }
    }
  }
}

}  // namespace
}  // namespace vlmd::engine
