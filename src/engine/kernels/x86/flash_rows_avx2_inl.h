// The AVX2 row steps of the flash attention driver (flash_attention_inl.h: Rows), and the bf16
// rounding and exp2 they share with the AVX2 bf16 row kernels (avx2/bf16_rows_avx2.cpp): the
// AVX-512 steps (flash_rows_avx512_inl.h) on 8-lane groups, with blends where those use masks.
//
// Include only from translation units compiled with AVX2 + FMA (x86/avx2, x86/avxvnni).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/kernels/flash_attention_inl.h"

namespace vlmd::engine::kernels::flash {
namespace {  // internal linkage: see flash_attention_inl.h

// 2^t for t <= 8 (the softmax terms 2^(s - m)): 2^f for f = t - floor(t) in [0, 1) from the
// polynomial of the AVX-512 Exp2NonPositive, times 2^floor(t) written as exponent bits. t is
// clamped at -127, whose exponent field 0 makes the result exactly 0 (as the AVX-512 version
// gives 0 below -126: never a denormal);
// a NaN passes through (vmaxps returns its second operand when either is NaN), and +inf gives
// NaN (f = inf - inf), as the softmax documents.
inline __m256 Exp2Avx2(__m256 t) {
  t = _mm256_max_ps(_mm256_set1_ps(-127.0f), t);
  const __m256 n = _mm256_floor_ps(t);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(0.0135341605f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.0520114748f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.241442748f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.693003836f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.00000259f));
  const __m256i scale = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

// 8 floats -> bf16, F32ToBF16's integer steps bit for bit (round to nearest even, NaN quiet).
inline __m128i RoundToBf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
  // Each 32-bit lane holds a value <= 0xFFFF: the unsigned saturation keeps it.
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// Lanes [j, j + 8) that lie in [lo, hi), as an all-ones / zero lane mask (j, lo, hi < 2^31).
inline __m256i LanesIn8(int64_t j, int64_t lo, int64_t hi) {
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(j)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(static_cast<int32_t>(lo - 1))),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(hi)), idx));
}

inline float ReduceMax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

inline float ReduceAdd8(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// Rows of 8-lane groups from the one holding lo. The score rows are read in whole groups (the
// driver's s block is 64-byte aligned, its rows kSStride apart, so a group never leaves its row):
// lanes outside [lo, hi) hold the chunk's scores of keys the row does not see, or the padding
// keys' zeros, and are blended away.
struct Avx2Rows {
  static float Max(const float* s, int64_t lo, int64_t hi) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    const int64_t j0 = hi > lo ? lo / 8 * 8 : 0, j1 = hi > lo ? hi : 0;
    for (int64_t j = j0; j < j1; j += 8) {
      const __m256 in = _mm256_castsi256_ps(LanesIn8(j, lo, hi));
      // vmaxps returns its second operand when the first is NaN: NaN scores are skipped.
      vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(_mm256_load_ps(s + j), vmax), in);
    }
    return ReduceMax8(vmax);
  }

  static void Scale(float* o, int64_t n, float alpha) {
    const __m256 va = _mm256_set1_ps(alpha);
    for (int64_t e = 0; e < n; e += 8) {
      _mm256_store_ps(o + e, _mm256_mul_ps(_mm256_load_ps(o + e), va));
    }
  }

  // Rows::Exp of flash_attention_inl.h: with kCheck, false as soon as a score of [lo, hi)
  // exceeds limit.
  template <bool kCheck>
  static bool Exp(const float* s, int64_t lo, int64_t hi, int64_t nk_pad, float m, float limit,
                  uint16_t* p, float* sum) {
    const int64_t j0 = hi > lo ? lo / 8 * 8 : 0, j1 = hi > lo ? hi : 0;
    const __m256 vm = _mm256_set1_ps(m), vlimit = _mm256_set1_ps(limit);
    __m256 vsum = _mm256_setzero_ps(), over = _mm256_setzero_ps();
    std::fill(p, p + j0, uint16_t{0});
    for (int64_t j = j0; j < j1; j += 8) {
      const __m256 in = _mm256_castsi256_ps(LanesIn8(j, lo, hi));
      const __m256 x = _mm256_load_ps(s + j);
      if constexpr (kCheck) {
        over = _mm256_or_ps(over, _mm256_and_ps(in, _mm256_cmp_ps(x, vlimit, _CMP_GT_OQ)));
      }
      const __m256 e = _mm256_and_ps(in, Exp2Avx2(_mm256_sub_ps(x, vm)));
      vsum = _mm256_add_ps(vsum, e);
      const __m128i b = RoundToBf16x8(e);
      std::memcpy(p + j, &b, sizeof(b));  // zeros outside [lo, hi)
    }
    if (_mm256_movemask_ps(over) != 0) return false;
    std::fill(p + std::max(j0, (j1 + 7) / 8 * 8), p + nk_pad, uint16_t{0});
    *sum = ReduceAdd8(vsum);
    return true;
  }

  static void Store(const float* o, float inv, int64_t n, uint16_t* out) {
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int64_t e = 0; e < n; e += 8) {
      const __m128i b = RoundToBf16x8(_mm256_mul_ps(_mm256_load_ps(o + e), vinv));
      std::memcpy(out + e, &b, static_cast<size_t>(std::min<int64_t>(8, n - e)) * 2);
    }
  }
};

}  // namespace
}  // namespace vlmd::engine::kernels::flash
