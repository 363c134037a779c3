// The AVX-512 row kernels of the bf16 paths (tile_bf16.h): f32 / f16 -> bf16 rows, the GELU of
// the tile epilogue, and the tile-layout packing of attention operands. Included by the
// AVX512-BF16 table's unit (its roundings are vcvtneps2bf16; the AMX table inherits them) and by
// the plain AVX-512 one (the same rounding in integer steps: flash::RoundToBf16).
//
// Include only from translation units compiled with AVX-512 F/BW/DQ/VL.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/kernels/kernel_table.h"
#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/flash_rows_avx512_inl.h"

namespace vlmd::engine::kernels::bf16_rows {
// Internal linkage: included by translation units of different ISA flags (see
// flash_attention_inl.h).
namespace {

using flash::Exp2NonPositive;

// Rounds n values to bf16, 16 at a time: load(i, mask) gives the f32 values [i, i + 16) (lanes
// outside the mask zero); only the n results are written.
template <typename Load>
void RoundRowToBf16(int64_t n, uint16_t* y, Load&& load) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16{0xFFFF}
                                       : static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(y + i, mask, flash::RoundToBf16(load(i, mask)));
  }
}

void ToBf16(const float* x, uint16_t* y, int64_t n) {
  RoundRowToBf16(n, y, [x](int64_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x + i); });
}

// f16 -> f32 (exact) -> bf16 with the same rounding as ToBf16.
void F16ToBf16(const uint16_t* x, uint16_t* y, int64_t n) {
  RoundRowToBf16(n, y, [x](int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
  });
}

// GELU (tanh form) for values rounded to bf16 or int8 afterwards, relative error < 1e-4:
// x / (1 + e^a), a = -2 sqrt(2/pi) (x + 0.044715 x^3), in the overflow-free form with
// z = 2^(-|a| log2 e): x / (1 + z) for a < 0, x z / (1 + z) otherwise; 1 / (1 + z), in [1/2, 1],
// is the 14-bit reciprocal estimate. The relative bound holds down to x ~ -8.7; below, where
// the true value is under 2^-126 |x|, the result is -0 (z is 0 there: never a denormal, which
// would cost a microcode assist per value; see Exp2NonPositive). x = -inf gives NaN (the
// encoder's final check reports it).
void GeluTanhFast(const float* x, float* y, int64_t n) {
  const __m512 k = _mm512_set1_ps(-2.0f * 0.7978845608f * 1.44269504f);  // in log2 units
  const __m512 k3 = _mm512_set1_ps(-2.0f * 0.7978845608f * 1.44269504f * 0.044715f);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16{0xFFFF}
                                       : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
    const __m512 a = _mm512_mul_ps(v, _mm512_fmadd_ps(_mm512_mul_ps(v, v), k3, k));
    // 2^-|a|, which is 0 for |a| > 126 (x below about -10), so that the result is then -0.
    const __m512 z = Exp2NonPositive(_mm512_or_ps(a, sign), -200.0f);
    const __m512 r = _mm512_rcp14_ps(_mm512_add_ps(one, z));
    const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ),
                                            z, one);
    _mm512_mask_storeu_ps(y + i, mask, _mm512_mul_ps(_mm512_mul_ps(v, num), r));
  }
}

// TileBf16Matrix::PackRows with AVX-512: each row of a panel's B tile (16 columns x one pair of
// k values, 32-bit words) is one gather of the same word from the panel's 16 source rows.
void PackRows(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid, int64_t k,
              uint16_t* dst) {
  if (row_stride > TileBf16Matrix::kMaxGatherRowStride) {
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
void PackColumns(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid,
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

// The slots these kernels fill.
void Fill(KernelTable* t) {
  t->to_bf16 = ToBf16;
  t->f16_to_bf16 = F16ToBf16;
  t->gelu_tanh_fast = GeluTanhFast;
  t->tile_pack_rows = PackRows;
  t->tile_pack_columns = PackColumns;
}

}  // namespace
}  // namespace vlmd::engine::kernels::bf16_rows
