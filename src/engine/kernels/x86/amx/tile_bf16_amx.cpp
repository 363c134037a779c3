// AMX bf16 tile matmul (tile_bf16.h) and the AVX512-BF16 f32 -> bf16 row conversion.
//
// Register blocking: 2 A tiles (32 activation rows) x 2 B tiles (32 output columns) feed 4 f32
// accumulator tiles, which is all 8 tile registers. Per 32-value k step that is 4 tile loads for
// 4 `tdpbf16ps` (each 16 x 16 x 32 multiply-adds). A whole 16 x 16 accumulator is stored straight
// into the output; edges (fewer rows or columns) and epilogues (bias, activation, accumulation,
// bf16 output) go through a 1 KB stack buffer per tile, so they need no special tile shapes.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/amx/amx_common.h"
#include "engine/kernels/x86/x86_fill.h"

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined here: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vlmd::engine::kernels {
namespace {

using amx::ConfigureTiles;
using amx::Exp2NonPositive;

// Where one accumulator tile's values go: row `row`, column col0 of the output, rows x cols valid.
struct BlockPlace {
  int64_t row = 0, col0 = 0;
  int rows = 0, cols = 0;
};

// The epilogue (tile_bf16.h) on one buffered 16 x 16 block, then its valid values written (or
// added) to their place in the output.
void FinishBlock(const TileBf16Args& args, float* block, const BlockPlace& place) {
  const int64_t row = place.row, col0 = place.col0;
  const int rows = place.rows, cols = place.cols;
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  const bool scaled = args.scale != 1.0f;
  if (scaled || args.bias != nullptr) {
    const __m512 bias = args.bias != nullptr ? _mm512_maskz_loadu_ps(mask, args.bias + col0)
                                             : _mm512_setzero_ps();
    for (int r = 0; r < rows; ++r) {
      __m512 v = _mm512_load_ps(block + r * 16);
      if (scaled) v = _mm512_mul_ps(v, _mm512_set1_ps(args.scale));
      _mm512_store_ps(block + r * 16, _mm512_add_ps(v, bias));
    }
  }
  // Whole rows of the block at once (the columns past `cols` hold products with zero padding).
  if (args.act != nullptr) args.act(block, block, 16 * rows);
  if (args.out_bf16 != nullptr) {
    for (int r = 0; r < rows; ++r) {
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_load_ps(block + r * 16));
      _mm256_mask_storeu_epi16(args.out_bf16 + (row + r) * args.ldo_bf16 + col0, mask,
                               reinterpret_cast<const __m256i&>(b));
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    __m512 v = _mm512_load_ps(block + r * 16);
    float* o = args.out + (row + r) * args.ldo + col0;
    if (args.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, o));
    _mm512_mask_storeu_ps(o, mask, v);
  }
}

// Stores one accumulator tile (row tile i of the block at row m, panel p): a whole 16 x 16 block
// without an epilogue goes straight into the output rows and false is returned; edges (fewer rows
// or columns) and epilogues go to `buf` (then true: FinishBlock must follow, once every tile of
// the block is stored, because the epilogue's activation is a call that may clobber tile
// registers). store(dst, stride_bytes) stores the tile (the tile register must be a literal in
// the intrinsic, hence the callable).
template <typename Store>
inline bool StoreAccumulator(const TileBf16Args& args, bool plain, int64_t m, int64_t m1,
                             int64_t p, int i, float* buf, BlockPlace* place, Store store) {
  place->row = m + 16 * i;
  place->col0 = p * kTileCols;
  place->rows = static_cast<int>(std::min<int64_t>(16, m1 - place->row));
  place->cols = static_cast<int>(std::min<int64_t>(16, args.n - place->col0));
  if (place->rows <= 0 || place->cols <= 0) return false;
  if (plain && place->rows == 16 && place->cols == 16) {
    store(args.out + place->row * args.ldo + place->col0,
          static_cast<size_t>(args.ldo) * sizeof(float));
    return false;
  }
  store(buf, size_t{64});
  return true;
}

// One block of MA x 16 rows by NB x 16 columns, starting at row m and panel p.
template <int MA, int NB>
void TileBlock(const TileBf16Args& args, bool plain, int64_t m, int64_t m1, int64_t p) {
  const int64_t steps = args.k / kTileK;
  const size_t a_stride = static_cast<size_t>(args.lda) * sizeof(uint16_t);
  const uint16_t* a0 = args.a + m * args.lda;
  const uint16_t* a1 = a0 + 16 * args.lda;
  const uint16_t* b0 = args.w + p * args.k * kTileCols;
  const uint16_t* b1 = b0 + args.k * kTileCols;
  _tile_zero(0);
  if constexpr (NB == 2) _tile_zero(1);
  if constexpr (MA == 2) _tile_zero(2);
  if constexpr (MA == 2 && NB == 2) _tile_zero(3);
  for (int64_t c = 0; c < steps; ++c) {
    _tile_loadd(4, a0 + c * kTileK, a_stride);
    _tile_loadd(6, b0 + c * kTileK * kTileCols, 64);
    if constexpr (NB == 2) _tile_loadd(7, b1 + c * kTileK * kTileCols, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MA == 2) {
      _tile_loadd(5, a1 + c * kTileK, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NB == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float buf[4][256];
  BlockPlace place[4];
  bool pending[4] = {};
  pending[0] = StoreAccumulator(args, plain, m, m1, p, 0, buf[0], &place[0],
                                [](float* d, size_t s) { _tile_stored(0, d, s); });
  if constexpr (NB == 2) {
    pending[1] = StoreAccumulator(args, plain, m, m1, p + 1, 0, buf[1], &place[1],
                                  [](float* d, size_t s) { _tile_stored(1, d, s); });
  }
  if constexpr (MA == 2) {
    pending[2] = StoreAccumulator(args, plain, m, m1, p, 1, buf[2], &place[2],
                                  [](float* d, size_t s) { _tile_stored(2, d, s); });
  }
  if constexpr (MA == 2 && NB == 2) {
    pending[3] = StoreAccumulator(args, plain, m, m1, p + 1, 1, buf[3], &place[3],
                                  [](float* d, size_t s) { _tile_stored(3, d, s); });
  }
  for (int t = 0; t < 4; ++t) {
    if (pending[t]) FinishBlock(args, buf[t], place[t]);
  }
}

// Rows [m0, m1) x panels [p0, p1): panel pairs outside, row pairs inside, so that a pair of B
// panels stays in L1/L2 while the activation rows stream past it. m0 must be a multiple of 16.
void TileBf16MatmulAmx(const TileBf16Args& args, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  ConfigureTiles();
  const bool plain = args.PlainStore();
  for (int64_t p = p0; p < p1; p += 2) {
    const bool two_panels = p + 1 < p1;
    for (int64_t m = m0; m < m1; m += 32) {
      const bool two_rows = m1 - m > 16;
      if (two_rows && two_panels) {
        TileBlock<2, 2>(args, plain, m, m1, p);
      } else if (two_rows) {
        TileBlock<2, 1>(args, plain, m, m1, p);
      } else if (two_panels) {
        TileBlock<1, 2>(args, plain, m, m1, p);
      } else {
        TileBlock<1, 1>(args, plain, m, m1, p);
      }
    }
  }
  _tile_release();
}

void ToBf16Avx512(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    std::memcpy(y + i, &v, sizeof(v));
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i));
    uint16_t tmp[16];
    std::memcpy(tmp, &v, sizeof(v));
    std::memcpy(y + i, tmp, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}

// f16 -> f32 (exact) -> bf16 with the same rounding instruction as ToBf16Avx512.
void F16ToBf16Avx512(const uint16_t* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    const __m256bh v = _mm512_cvtneps_pbh(f);
    std::memcpy(y + i, &v, sizeof(v));
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 f = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, x + i));
    const __m256bh v = _mm512_cvtneps_pbh(f);
    uint16_t tmp[16];
    std::memcpy(tmp, &v, sizeof(v));
    std::memcpy(y + i, tmp, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}

// GELU (tanh form) for values rounded to bf16 afterwards, relative error < 1e-4:
// x / (1 + e^a), a = -2 sqrt(2/pi) (x + 0.044715 x^3), in the overflow-free form with
// z = 2^(-|a| log2 e): x / (1 + z) for a < 0, x z / (1 + z) otherwise; 1 / (1 + z), in [1/2, 1],
// is the 14-bit reciprocal estimate. The relative bound holds down to x ~ -8.7; below, where
// the true value is under 2^-126 |x|, the result may be a denormal or 0 (vcvtneps2bf16 makes
// denormals 0 anyway). x = -inf gives NaN (the encoder's final check reports it).
void GeluTanhForBf16Avx512(const float* x, float* y, int64_t n) {
  const __m512 k = _mm512_set1_ps(-2.0f * 0.7978845608f * 1.44269504f);  // in log2 units
  const __m512 k3 = _mm512_set1_ps(-2.0f * 0.7978845608f * 1.44269504f * 0.044715f);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16{0xFFFF}
                                       : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
    const __m512 a = _mm512_mul_ps(v, _mm512_fmadd_ps(_mm512_mul_ps(v, v), k3, k));
    // 2^-|a|, which is 0 for |a| >= 200 (x below about -12), so that the result is then -0 for any x.
    const __m512 z = Exp2NonPositive(_mm512_or_ps(a, sign), -200.0f);
    const __m512 r = _mm512_rcp14_ps(_mm512_add_ps(one, z));
    const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ),
                                            z, one);
    _mm512_mask_storeu_ps(y + i, mask, _mm512_mul_ps(_mm512_mul_ps(v, num), r));
  }
}

// TileBf16Matrix::PackRows with AVX-512: each row of a panel's B tile (16 columns x one pair of
// k values, 32-bit words) is one gather of the same word from the panel's 16 source rows.
void PackRowsAvx512(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid,
                    int64_t k, uint16_t* dst) {
  if (row_stride > (int64_t{1} << 26)) {  // gather offsets (15 rows apart) must fit in int32
    TileBf16Matrix::PackRows(rows, row_stride, n, k_valid, k, dst);
    return;
  }
  const int64_t panels = (n + kTileCols - 1) / kTileCols;
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  // Byte offsets of the 16 source rows (row_stride values of 2 bytes each).
  const __m512i offsets = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(
                                                        static_cast<int32_t>(row_stride * 2)));
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* panel = dst + p * k * kTileCols;
    const int64_t cols = std::min<int64_t>(kTileCols, n - p * kTileCols);
    const __mmask16 valid = static_cast<__mmask16>((1u << cols) - 1u);
    const uint16_t* base = rows + p * kTileCols * row_stride;
    for (int64_t w = 0; w < k / 2; ++w) {
      __m512i v = _mm512_setzero_si512();
      if (2 * w + 1 < k_valid) {
        v = _mm512_mask_i32gather_epi32(v, valid, offsets, base + 2 * w, 1);
      } else if (2 * w < k_valid) {  // odd k_valid: the last value, its pair partner zero
        alignas(64) uint32_t words[16] = {};
        for (int64_t j = 0; j < cols; ++j) words[j] = base[j * row_stride + 2 * w];
        v = _mm512_load_si512(words);
      }
      _mm512_storeu_si512(panel + w * 2 * kTileCols, v);
    }
  }
}

// TileBf16Matrix::PackColumns with AVX-512: a B tile row interleaves 16 values of two
// consecutive rows (k values 2w and 2w + 1 of the panel's 16 columns).
void PackColumnsAvx512(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid,
                       int64_t k, uint16_t* dst) {
  const int64_t panels = (n + kTileCols - 1) / kTileCols;
  alignas(64) uint16_t interleave[32];
  for (int j = 0; j < 16; ++j) {
    interleave[2 * j] = static_cast<uint16_t>(j);
    interleave[2 * j + 1] = static_cast<uint16_t>(32 + j);
  }
  const __m512i idx = _mm512_load_si512(interleave);
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* panel = dst + p * k * kTileCols;
    const int64_t cols = std::min<int64_t>(kTileCols, n - p * kTileCols);
    const __mmask32 valid = static_cast<__mmask32>((1u << cols) - 1u);
    const uint16_t* col = rows + p * kTileCols;
    for (int64_t i = 0; i < k; i += 2) {
      const __m512i r0 = i < k_valid ? _mm512_maskz_loadu_epi16(valid, col + i * row_stride)
                                     : _mm512_setzero_si512();
      const __m512i r1 = i + 1 < k_valid
                             ? _mm512_maskz_loadu_epi16(valid, col + (i + 1) * row_stride)
                             : _mm512_setzero_si512();
      _mm512_storeu_si512(panel + i * kTileCols, _mm512_permutex2var_epi16(r0, idx, r1));
    }
  }
}

}  // namespace

void FillAmxKernels(KernelTable* t) {
  t->tile_bf16_matmul = TileBf16MatmulAmx;
  t->to_bf16 = ToBf16Avx512;
  t->f16_to_bf16 = F16ToBf16Avx512;
  t->tile_attention = amx::TileAttentionAmx;
  t->gelu_tanh_for_bf16 = GeluTanhForBf16Avx512;
  t->tile_pack_rows = PackRowsAvx512;
  t->tile_pack_columns = PackColumnsAvx512;
  FillAmxPackedToTiles(t);
}

}  // namespace vlmd::engine::kernels
