// Packing into the panel layout (kernels/packed_int8.h): the packing keeps every weight exactly
// (Q8_0, Q4_0) or quantizes it by the Q8_0 rule (Q5_K/Q6_K; F32/F16/BF16 with one scale per
// column, or Q8_0 blocks when a column would lose too much; fast precision), on one thread or a
// pool, refuses what it cannot pack, and converts panels to bf16 tiles as its reference says.
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
      {DType::kBF16, 96}, {DType::kF32, 96},  {DType::kQ5_K, 512}, {DType::kQ6_K, 512},
      {DType::kQ5_1, 96}, {DType::kIQ4_NL, 96}, {DType::kQ2_K, 512}, {DType::kQ3_K, 512},
      {DType::kIQ4_XS, 512}};
  for (const auto& [type, k] : type_k) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const std::vector<float> wf = RandomFloats(n * k, 7);
    const std::vector<uint8_t> rows =
        FindQuantizeRowFn(type) != nullptr ? Rows(type, wf, n, k) : RandomBlocks(type, n, k, 7);
    auto pm = PackedMatrix::Pack(type, rows.data(), *RowBytes(type, k), n, k);
    ASSERT_TRUE(pm.ok()) << pm.status().ToString();
    EXPECT_EQ((*pm)->panels(), 3);
    const bool float_rows = type == DType::kF16 || type == DType::kBF16 || type == DType::kF32;
    EXPECT_EQ((*pm)->format() == kernels::PackedFormat::kQ8Col, float_rows);
    // What the packed matrix must hold: the GGUF values, or their Q8_0 quantization (Q5_K,
    // Q6_K and the read-only formats), or their quantization with one scale per column (floats).
    std::vector<float> want(n * k), row(k);
    for (int64_t c = 0; c < n; ++c) {
      ASSERT_TRUE(DequantizeRow(type, rows.data() + c * *RowBytes(type, k), row.data(), k).ok());
      if (float_rows) {
        row = ColumnRule(row);
      } else if (type != DType::kQ8_0 && type != DType::kQ5_0 && type != DType::kQ4_0 &&
                 type != DType::kIQ4_NL) {
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
