// The AVX2 FMA steps of the bf16 flash attention's products (flash_pair_fma_inl.h): a K panel's
// row w holds 16 keys x the pair (2w, 2w + 1) of head dims (a V^T panel's row: 16 head dims x a
// pair of keys) as 32-bit words, read as two halves of 8: a shift and a mask make each half's
// even and odd values 8 f32 lanes, which two FMAs multiply by one query's (or probability row's)
// pair, broadcast from an f32 copy of its row. Tiles of kRows rows x one panel (two halves).
// Used by avx2/tile_attention_avx2.cpp (both products) and avxvnni/tile_attention_avxvnni.cpp
// (P V next to the int8 scores).
//
// Include only from translation units compiled with AVX2 and FMA.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/flash_pair_fma_inl.h"
#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels::pair_fma_avx2 {
namespace {  // internal linkage: see flash_attention_inl.h

constexpr int kRows = 6;  // query rows per register tile: 12 accumulators

// The pair-FMA steps of flash_pair_fma_inl.h.
struct Avx2Fma {
  // bf16 values to f32: the bits moved into the high half (exact). n a multiple of 8.
  static void Widen(const uint16_t* a, int64_t lda, int64_t rows, int64_t n, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + r * lda + i));
        _mm256_store_ps(out + r * n + i,
                        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
      }
    }
  }

  // C rows [0, R) x the 16 columns of one panel (+)= the sum over `pairs` steps w of A's row
  // pair w (f32 rows of `lda`, broadcast) times row w of the panel (bf16 pairs at b + 32 w).
  // C: f32 rows ldc apart, 32-byte aligned. Per step the even values of the panel row (both
  // halves) meet every row's first broadcast, then the odd ones the second: 2R accumulators, two
  // panel vectors and a broadcast in registers.
  template <int R, bool kAccumulate>
  static void Tile(const float* a, int64_t lda, const uint16_t* b, int64_t pairs, float* c,
                   int64_t ldc) {
    __m256 acc[R][2];
    for (int i = 0; i < R; ++i) {
      for (int h = 0; h < 2; ++h) {
        acc[i][h] = kAccumulate ? _mm256_load_ps(c + i * ldc + h * 8) : _mm256_setzero_ps();
      }
    }
    const __m256i high = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
    for (int64_t w = 0; w < pairs; ++w) {
      const auto* row = reinterpret_cast<const __m256i*>(b + w * 2 * kTileCols);
      const float* aw = a + 2 * w;
      __m256 b0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(row), 16));
      __m256 b1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(row + 1), 16));
      for (int i = 0; i < R; ++i) {
        const __m256 ae = _mm256_broadcast_ss(aw + i * lda);
        acc[i][0] = _mm256_fmadd_ps(ae, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(ae, b1, acc[i][1]);
      }
      b0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(row), high));
      b1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(row + 1), high));
      for (int i = 0; i < R; ++i) {
        const __m256 ao = _mm256_broadcast_ss(aw + i * lda + 1);
        acc[i][0] = _mm256_fmadd_ps(ao, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(ao, b1, acc[i][1]);
      }
    }
    for (int i = 0; i < R; ++i) {
      for (int h = 0; h < 2; ++h) _mm256_store_ps(c + i * ldc + h * 8, acc[i][h]);
    }
  }
};

using Products = flash::PairFmaProducts<Avx2Fma, kRows>;

}  // namespace
}  // namespace vlmd::engine::kernels::pair_fma_avx2
