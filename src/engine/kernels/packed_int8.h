// Packed int8 weights: a weight matrix repacked once at load into the layout the VNNI micro-kernel
// wants, so that one 512-bit vpdpbusd computes 4 k-steps of 16 output columns at once, with the
// activation's 4 bytes broadcast. The row-major GGUF layout needs a horizontal sum per output
// instead, which is what makes the plain Q4_0/Q8_0 kernels compute-bound.
//
// Layout: the n output columns are cut into panels of kPanelCols (the last one zero-padded); for
// each panel p and each 32-element k block b there are
//   qs     : kQ8: 512 bytes, byte [q * 64 + j * 4 + r] = u8(w[16p + j][32b + 4q + r] + 128)
//                 (q = 0..7 k-quads, j = 0..15 columns, r = 0..3)
//            kQ4: 256 bytes, byte [c * 64 + j * 4 + r] = w4[.. 32b + 8c + r] | w4[.. 32b + 8c + 4 + r] << 4
//                 (c = 0..3; w4 = the Q4_0 nibble 0..15, i.e. the weight / d + 8)
//            kQ4K: as kQ4, w4 = the Q4_K quant 0..15 of that 32-value sub-block
//   scales : 16 f16 values d (one per column; 0 in padding columns); none in kQ8Col
//   mins   : kQ4K only: 16 f16 values mn (Q4_K's dmin * m of the sub-block)
// kQ8Col is kQ8's bytes with one f32 scale per column for all of k instead (column_scales:
// 16 per panel, panel after panel), for float rows only (below).
// qs, scales and mins are separate arrays, each in groups of group_panels() panels: group g,
// block b holds the group's panels' entries one after the other, then block b + 1 follows; a
// last group with fewer panels is padded. kQ4 and kQ4K use groups of 4 (kPanelGroup), so that a
// GEMV tile over a group reads one contiguous stream per array: with each panel's blocks one
// after the other, the tile's 4 panels were 4 short streams, and q4_0 decode was ~8% slower
// (2 threads, SmolLM2-135M shape). kQ8 keeps groups of 1 (panel after panel), which measured
// ~6-10% faster than groups of 4 for q8_0 decode on the same machine. The weight is
// d * (u - offset) with offset 128 (kQ8) or 8 (kQ4), d * u - mn for kQ4K; the offset and min terms
// are subtracted through the activation block sums: the min term of a block is mn * (d_a * sum(a)),
// d_a * sum(a) once per row and block, then one fused multiply-subtract per column. Either
// product is exact in f32 (f16 x f16: 22 significant bits; f16 x |sum(a)| <= 32 * 128: 23), so
// this is the result of (mn * d_a) * sum(a) bit for bit, with one multiply per row instead of one
// per column, and without per-column temporaries the x86 q4_K GEMM tiles take q4_0's shape (q4_K
// at 0.76-0.79 of q4_0's GEMM rate before, 0.83-0.97 after: bench/RESULTS.md, session 34).
//
// k: a multiple of 32 for the block types (their rows are whole blocks). Float rows (F32, F16,
// BF16) may have any k >= 1: the last block is then padded with zeros (its scale is that of the
// real values), and the activation rows are converted padded the same way (convert_q8_0_sums), so
// the padding contributes 0. Vision towers have such widths: Qwen2.5-VL's FFN is 3420 wide and
// SigLIP-so400m's (Gemma 3) 4304, and their down projections ran on f32 FMAs without it.
//
// Exactness: Q8_0, Q5_0 (as kQ8: q - 16 fits a byte), IQ4_NL (as kQ8: its 16 levels are bytes)
// and Q4_0 rows repack bit for bit (the same integers and scales as the GGUF blocks). The values of Q5_K and Q6_K rows are quantized to
// Q8_0 blocks (round to nearest, ggml's rule) first (an error of at most 1/254 of a 32-value
// block's largest weight, where Q6_K's own reaches 1/64 of a 16-value sub-block's), and so are
// those of the formats vlmd has no kernel for (Q5_1, Q2_K, Q3_K, IQ4_XS: 8.5 bits per weight
// packed, where the file held 2.6-6). F32/F16/BF16
// rows (the vision towers' weights as the mmproj files ship them) are quantized per column
// instead, d = the column's largest |w| / 127 for all of k (kQ8Col), when that costs every column
// at most kColumnScaleErrorRatio times the squared error of the Q8_0 blocks; otherwise (a column
// with an outlier weight, which would coarsen all of it) the whole matrix takes Q8_0 blocks (kQ8).
// One scale per column turns the kernels' per-block epilogue from convert, scale product, FMA
// into convert, FMA, with the weight scale applied once at the end: the scale product shared
// vpdpbusd's ports and capped the VNNI GEMMs at 0.8 of their integer rate (bench/RESULTS.md,
// sessions 24, 36 and 37).
// Q4_K keeps its quants but its per-sub-block scale and min become f16 products, and its
// activations are Q8_0 blocks where ggml uses Q8_K: all are the engine's `fast` precision,
// never used in `exact`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/large_alloc.h"
#include "core/status.h"
#include "engine/tensor/dtype.h"

namespace vlmd {
class ThreadPool;  // core/thread_pool.h
}  // namespace vlmd

namespace vlmd::engine {
struct BlockQ4_0;  // engine/tensor/quant_blocks.h
struct BlockQ4_K;
struct BlockQ8_0;
}  // namespace vlmd::engine

namespace vlmd::engine::kernels {

inline constexpr int kPanelCols = 16;
inline constexpr int kPackBlock = 32;
inline constexpr int kPanelGroup = 4;  // kQ4/kQ4K panels interleaved block by block (layout)

enum class PackedFormat : uint8_t { kQ8 = 0, kQ4 = 1, kQ4K = 2, kQ8Col = 3 };
// Layout constants of a format (the kernels take them at compile time).
constexpr bool HasNibbles(PackedFormat f) {
  return f == PackedFormat::kQ4 || f == PackedFormat::kQ4K;
}
constexpr size_t QsBytesPerBlock(PackedFormat f) { return HasNibbles(f) ? 256 : 512; }
constexpr int64_t GroupPanels(PackedFormat f) { return HasNibbles(f) ? kPanelGroup : 1; }
// The packed layout a weight type becomes: kQ4 for Q4_0, kQ4K for Q4_K, else kQ8 (float rows
// may become kQ8Col, its column-scaled variant: PackConcat decides from the values).
PackedFormat PackedFormatOf(DType dtype);
// The most squared error per column, relative to Q8_0 blocks', at which float rows take one scale
// per column (kQ8Col). Simulated rows of k = 1024 and 4096 (60 each): Gaussian values 1.5-3.5,
// Laplace 2.0-7.1, Student-t with 5 degrees of freedom 1.8-29 (medians 3.8 and 7.6): tails
// heavier than Laplace's keep Q8_0 blocks, as does a long column with one outlier weight (its
// ratio is about k / 32).
inline constexpr double kColumnScaleErrorRatio = 8.0;

// n consecutive output columns (weight rows) of one source matrix: row r at data + r * row_bytes.
struct PackSource {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  size_t row_bytes = 0;
  int64_t n = 0;
  std::string_view name = {};  // the weight's tensor, for errors (may be empty)
};

class PackedMatrix {
 public:
  // Packs n rows of k elements (row r at data + r * row_bytes) of `dtype`: kQ4 from Q4_0, kQ4K
  // from Q4_K, kQ8 from Q8_0, Q5_0, Q5_K, Q6_K, Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS, kQ8Col or kQ8
  // from F32, F16 or BF16 (see
  // kColumnScaleErrorRatio). INVALID_ARGUMENT for other
  // types, k < 1, a block type's k not a multiple of its block (32; 256 for the K-quants), n < 1,
  // or row_bytes too small; RESOURCE_EXHAUSTED when the buffer cannot be allocated.
  static Result<std::unique_ptr<PackedMatrix>> Pack(DType dtype, const void* data,
                                                    size_t row_bytes, int64_t n, int64_t k);
  // Packs the sources one after the other into one matrix of sum(n) columns (a fused Q/K/V or
  // gate/up projection: one matmul call instead of several). All sources share k; they must all
  // pack to the same format (PackedFormatOf); kQ8Col when they are all float rows and every
  // column passes the error test. Same errors as Pack. With a pool, panel groups are packed in
  // parallel (the same bytes as without).
  static Result<std::unique_ptr<PackedMatrix>> PackConcat(std::span<const PackSource> sources,
                                                          int64_t k, ThreadPool* pool = nullptr);
  // True when Pack accepts the type (k and n aside).
  static bool CanPack(DType dtype);

  PackedFormat format() const { return format_; }
  // Whether every row it was packed from was a float row (F32/F16/BF16): the matrices whose
  // format the column test chose (kQ8Col, or kQ8 when a column failed it).
  bool from_float_rows() const { return from_float_rows_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t panels() const { return panels_; }
  // k in whole 32-element blocks, the last one zero-padded when k is not a multiple of 32.
  int64_t blocks() const { return (k_ + kPackBlock - 1) / kPackBlock; }
  int offset() const {
    return format_ == PackedFormat::kQ4 ? 8 : format_ == PackedFormat::kQ4K ? 0 : 128;
  }
  size_t qs_bytes_per_block() const { return QsBytesPerBlock(format_); }
  int64_t group_panels() const { return GroupPanels(format_); }
  // From one block of a panel to its next block: in bytes for qs, in f16 values for scales/mins.
  size_t qs_block_stride() const { return group_panels() * qs_bytes_per_block(); }
  int64_t scale_block_stride() const { return group_panels() * kPanelCols; }
  const uint8_t* qs(int64_t panel, int64_t block) const {
    return qs_.get() + Unit(panel, block) * qs_bytes_per_block();
  }
  // Not kQ8Col (nullptr there).
  const uint16_t* scales(int64_t panel, int64_t block) const {
    return scales_ ? scales_.get() + Unit(panel, block) * kPanelCols : nullptr;
  }
  // kQ8Col only: the panel's 16 column scales.
  const float* column_scales(int64_t panel) const {
    return column_scales_.get() + panel * kPanelCols;
  }
  // kQ4K only (nullptr otherwise).
  const uint16_t* mins(int64_t panel, int64_t block) const {
    return mins_ ? mins_.get() + Unit(panel, block) * kPanelCols : nullptr;
  }
  size_t bytes() const { return BytesFor(format_, n_, k_); }  // memory held
  // What a matrix of n columns of k values takes in format f (a loader's memory cap asks before
  // packing; kQ8 is the most a float matrix can take: kQ8Col is smaller).
  static size_t BytesFor(PackedFormat f, int64_t n, int64_t k);
  // Unique in the process and never reused (unlike an address): the key of a kernel's cache of
  // data derived from this matrix, which never changes once packed.
  uint64_t serial() const { return serial_; }

 private:
  PackedMatrix() = default;
  // Index of (panel, block) in units of one panel's block (see the layout).
  size_t Unit(int64_t panel, int64_t block) const {
    const int64_t g = group_panels();
    return static_cast<size_t>(((panel / g) * blocks() + block) * g + panel % g);
  }
  // Units allocated: whole groups.
  size_t Units() const {
    const int64_t g = group_panels();
    return static_cast<size_t>((panels_ + g - 1) / g * g * blocks());
  }
  // Weight row `col` (one output column) into its panel slot: Q4_0 nibbles / Q8_0 bytes + scales.
  void PackColumnQ4(int64_t col, const BlockQ4_0* row);
  void PackColumnQ8(int64_t col, const BlockQ8_0* row);
  // kQ8Col: column `col`'s scale d and its blocks() * 32 quants (the zero-padded row's).
  void PackColumnScaled(int64_t col, float d, const int8_t* q);
  // Block `block` of column `col` in the kQ8 byte order: its 32 int8 quants + 128.
  void PackQuants(int64_t col, int64_t block, const int8_t* q);
  void PackColumnQ4K(int64_t col, const BlockQ4_K* row);
  // The 4-bit values of one 32-value block into column j of its panel block (kQ4 / kQ4K layout).
  void PackNibbles(int64_t col, int64_t block, const uint8_t* nibbles);

  PackedFormat format_ = PackedFormat::kQ8;
  bool from_float_rows_ = false;
  int64_t n_ = 0, k_ = 0, panels_ = 0;
  uint64_t serial_ = 0;
  // In huge-page-backed memory (core/large_alloc.h): decode streams all of it once per token.
  LargeArray<uint8_t> qs_;
  LargeArray<uint16_t> scales_;
  LargeArray<uint16_t> mins_;
  LargeArray<float> column_scales_;
};

// From this many rows a product's activations get PackedMatmulArgs::a_scales / a_offsets, and the
// x86 kernels' calls of as many rows take them (x86/packed_matmul_inl.h).
inline constexpr int64_t kGemmPrepMinRows = 16;

// Activation rows for the packed matmul: Q8_0 blocks (as the plain Q4_0/Q8_0 kernels use) plus,
// per row and block, the sum of the 32 quants (for the offset correction).
struct PackedMatmulArgs {
  const PackedMatrix* w = nullptr;
  const uint8_t* a = nullptr;  // BlockQ8_0 rows, row m at a + m * a_row_bytes
  size_t a_row_bytes = 0;
  const int32_t* a_sums = nullptr;  // row m, block b at a_sums[m * w->blocks() + b]
  // Optional, for calls of kGemmPrepMinRows rows or more (ops::MatMul fills them for such
  // products), same indexing as a_sums: each block's activation scale d as f32, and
  // -w->offset() * its sum. A kernel may take them instead of converting per tile (the x86
  // GEMMs); the results are the same.
  const float* a_scales = nullptr;
  const int32_t* a_offsets = nullptr;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t gemv_prefetch_blocks_q4 = 4;  // KernelTable::gemv_prefetch_blocks_q4 (x86 kernels)
};

// Scalar reference of the packed matmul (what the SIMD kernels are tested against): per column,
// the same integer block dots and f32 scaling as the kernels, accumulated block by block
// (acc = fma(dot, d_w * d_a, acc); kQ8Col: acc = fma(dot, d_a, acc), then acc * d_w).
void PackedMatmulRef(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0, int64_t p1);

// Panels [p0, p1) of w in the bf16 tile layout of tile_bf16.h: panel p at dst + (p - p0) * k * 16
// (k = w.k(), which must be a multiple of 32: ops::MatMul keeps other matrices off this path,
// and a check stops the program otherwise). Each weight is fma(u, d, bias) in f32, bias =
// -offset d (the exact value d (u - offset), a zero as +0) or -mn for kQ4K (one rounding),
// rounded to bf16 (nearest even); padding columns are zero. For the fast precision's GEMMs on
// the tile unit; this is the scalar reference the SIMD version (KernelTable::packed_to_tiles)
// must match bit for bit.
void PackedToTilesRef(const PackedMatrix& w, int64_t p0, int64_t p1, uint16_t* dst);

// Fills sums[b] = sum of the 32 quants of block b of one BlockQ8_0 row of k elements.
void SumQ8_0Blocks(const void* row, int64_t k, int32_t* sums);

// The reference of KernelTable::convert_q8_0_sums: the activation quantizer, then SumQ8_0Blocks.
void ConvertQ8_0SumsRef(const float* x, void* y, int32_t* sums, int64_t k);

}  // namespace vlmd::engine::kernels
