// Tile-packed bf16 weights for the AMX matmul: a weight matrix converted once at load into the
// operand layout of the AMX `tdpbf16ps` instruction, whose B tile is 16 rows of 64 bytes holding
// 16 output columns x 2 consecutive k values each. One tile instruction then does a 16 x 16 x 32
// block product with f32 accumulation (a few hundred times the work of one vector FMA).
//
// Layout: the n output columns are cut into panels of kPanelCols (16; the last one zero-padded).
// Panel p holds k/2 rows of 64 bytes; row r, column j is the pair (w[16p + j][2r], w[16p + j][2r+1])
// as bf16 (round to nearest even). So the B tile for k block c (32 values) is the 16 rows
// starting at row 16c: panel data + c * 512 elements, stride 64 bytes.
//
// Numerics: weights and activations are rounded to bf16 (8 significant bits), products are
// accumulated in f32. That is the engine's `fast` precision, never used in `exact`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/large_alloc.h"
#include "core/status.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::kernels {

inline constexpr int kTileCols = 16;   // output columns per panel (one B tile's width)
inline constexpr int kTileK = 32;      // k values per tile step (one A tile row: 64 bytes)
inline constexpr int kTileRows = 16;   // activation rows per A tile

// Row stride (elements) of bf16 activation rows `width` values wide that feed the tile matmul:
// one cache line longer than the row, so that the 16 rows of an A tile do not all map to the
// same L1 sets when a row is a multiple of 4 KiB (k = 2048, 3072: measured 7% faster at 3072).
inline int64_t TileRowStride(int64_t width) { return width + 32; }

class TileBf16Matrix {
 public:
  // Packs n rows of k elements (row r at data + r * row_bytes) of F32, F16, BF16 or Q8_0 (each
  // value rounded to bf16). k need not be a multiple of 32: the panels hold k_padded() values
  // per column, the ones past k zero (the activations' padding columns must then be zero too).
  // INVALID_ARGUMENT for other types, n < 1, k < 1 or row_bytes too small;
  // RESOURCE_EXHAUSTED when the buffer cannot be allocated.
  static Result<std::unique_ptr<TileBf16Matrix>> Pack(DType dtype, const void* data,
                                                      size_t row_bytes, int64_t n, int64_t k);
  // Packing of per-call operands from bf16 values already rounded (attention's K and V):
  //  - PackRows: column j is row j of `rows` (row_stride elements apart), its k_valid values
  //    contiguous; e.g. K [n_pos, head_dim] as the columns of Q K^T.
  //  - PackColumns: column j is element j of each of k_valid rows of `rows` (row_stride apart),
  //    n values each; e.g. V [n_pos, head_dim] as the columns of P V (V^T's rows).
  // Both zero-extend k_valid to k (a multiple of 32) and write PanelElements(n, k) values.
  static void PackRows(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid,
                       int64_t k, uint16_t* dst);
  static void PackColumns(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid,
                          int64_t k, uint16_t* dst);
  // The largest row_stride the SIMD PackRows gathers: byte offsets of rows up to 15 apart must
  // fit int32 (a larger stride takes the scalar PackRows).
  static constexpr int64_t kMaxGatherRowStride = int64_t{1} << 26;
  static size_t PanelElements(int64_t n, int64_t k) {
    return static_cast<size_t>((n + kTileCols - 1) / kTileCols) * static_cast<size_t>(k) *
           kTileCols;
  }
  static bool CanPack(DType dtype) {
    return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
           dtype == DType::kQ8_0;
  }

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }  // the weight's row length
  int64_t k_padded() const { return PaddedK(k_); }  // values per column in the panels
  static int64_t PaddedK(int64_t k) { return (k + kTileK - 1) / kTileK * kTileK; }
  int64_t panels() const { return (n_ + kTileCols - 1) / kTileCols; }
  const uint16_t* data() const { return data_.get(); }
  size_t bytes() const { return BytesFor(n_, k_); }
  static size_t BytesFor(int64_t n, int64_t k) { return PanelElements(n, PaddedK(k)) * sizeof(uint16_t); }

 private:
  TileBf16Matrix() = default;

  int64_t n_ = 0, k_ = 0;
  LargeArray<uint16_t> data_;  // huge-page-backed (core/large_alloc.h)
};

// One tile matmul call: out[m, j] = sum_i a[m, i] * w[j, i] for rows [m0, m1), panels [p0, p1).
//   a: bf16 activation rows (row m at a + m * lda elements), readable up to row RoundUp(m1, 16)
//      (rows past m1 only feed output rows that are not written; callers pad with zeros); k values
//      per row, k a multiple of 32.
//   w: panels as above (panel p at w + p * k * 16), n valid columns (padding columns are zero).
//   out: f32, row m at out + m * ldo; only columns < n and rows < m1 are written.
// `accumulate` adds to out instead of overwriting it (a residual connection).
//
// Epilogue, applied to each sum v of row m, column j while its 16 x 16 block is in L1, before it
// is written: v = act(v * scale + bias[j]); absent parts are skipped. With
// out_bf16 set, the values are rounded to bf16 into out_bf16 (row m at out_bf16 + m * ldo_bf16)
// instead of going to out: the next tile product reads them without a conversion pass
// (accumulate must then be false).
// Elementwise, x == y allowed. Never uses the tile unit: the AMX kernel calls it between the
// tile instructions of its next block (a vector kernel of the table, e.g. gelu_tanh_fast).
using TileActFn = void (*)(const float* x, float* y, int64_t n);
struct TileBf16Args {
  const uint16_t* a = nullptr;
  int64_t lda = 0;
  const uint16_t* w = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  bool accumulate = false;
  float scale = 1.0f;
  const float* bias = nullptr;       // [n] or nullptr
  TileActFn act = nullptr;
  uint16_t* out_bf16 = nullptr;
  int64_t ldo_bf16 = 0;

  // True when the sums go to `out` unchanged (the kernel may store whole tiles directly).
  bool PlainStore() const {
    return !accumulate && out_bf16 == nullptr && bias == nullptr && act == nullptr &&
           scale == 1.0f;
  }
};

// Attention of one head on the tile unit, flash-style (every key, or a range of keys per query,
// below): for each query row i < n_q,
//   out[i, e] = bf16( sum_j 2^(s_ij - m_i) v_je / sum_j 2^(s_ij - m_i) ),  e < hd,
// with s_ij = q_i . k_j in log2 units (the caller folds log2 e into q's scale) and m_i the row's
// running max. Keys go in chunks of kTileAttentionChunk whose scores and probabilities stay in
// L1: the probabilities are rounded to bf16 for the P V product, their sums stay f32.
//   q: bf16 rows of hd_pad values (zero past hd), row i at q + i * ldq, readable up to row
//      n_q rounded up to 32 (rows past n_q only feed outputs that are not written).
//   k_tiles: TileBf16Matrix::PackRows of K (n_kv columns of hd_pad values);
//   v_tiles: TileBf16Matrix::PackColumns of V (hd columns of v_k >= n_kv rounded up to 32 keys).
//   out: bf16, row i at out + i * ldo, hd values; o_scratch: 32 * (hd_pad + 16) floats,
//   64-byte aligned.
// hd_pad is a multiple of 32, at most 512 (kernels stage rows of it on the stack). A NaN or +inf
// score makes its row's output NaN; a row of only -inf scores gives zeros.
// Key ranges (kv_first and kv_end both set; a causal mask, a sliding window): query i sees keys
// [kv_first[i], kv_end[i]) (clamped to [0, n_kv]), and a query that sees no key gets zeros. Per
// block of 32 queries, keys are read from the chunk holding the block's first visible one to its
// last visible one, rounded up to the tile edge (16 keys of K, 32 of V), and weighted 0 outside
// each row's own range: those must be finite (or the tile padding's zeros). Chunks start at
// multiples of kTileAttentionChunk, and a chunk that holds none of a row's keys gives the row
// probabilities 0 only (its output rows get 0 x V added: with finite keys, as required above,
// nothing changes), so a row's result depends only on its own range and keys, never on the other
// rows of the call (a prompt gives the same bits however it is cut into calls).
inline constexpr int64_t kTileAttentionChunk = 128;
struct TileAttentionArgs {
  const uint16_t* q = nullptr;
  int64_t ldq = 0;
  const uint16_t* k_tiles = nullptr;
  const uint16_t* v_tiles = nullptr;
  int64_t v_k = 0;
  int64_t n_q = 0, n_kv = 0, hd = 0, hd_pad = 0;
  uint16_t* out = nullptr;
  int64_t ldo = 0;
  float* o_scratch = nullptr;
  const int32_t* kv_first = nullptr;  // [n_q]
  const int32_t* kv_end = nullptr;    // [n_q]
  // KernelTable::tile_attention_i8 only, instead of q and k_tiles: the scores on int8
  // (attention_i8.h). q_u8: query rows of hd_pad bytes, ldq bytes apart, readable (and q_scale
  // set) for whole 32-row blocks like q; k_i8: the key panels of n_kv keys with their k_scale and
  // k_bias (KeyPanelsI8Keys(n_kv) each).
  const uint8_t* q_u8 = nullptr;
  const float* q_scale = nullptr;
  const int8_t* k_i8 = nullptr;
  const float* k_scale = nullptr;
  const int32_t* k_bias = nullptr;
};

// Scalar reference of the tile matmul: the same bf16 products, f32 accumulation in k order.
void TileBf16MatmulRef(const TileBf16Args& args, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
void ToBf16Ref(const float* x, uint16_t* y, int64_t n);

}  // namespace vlmd::engine::kernels
