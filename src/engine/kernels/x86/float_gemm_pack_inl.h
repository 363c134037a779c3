// Weight packing of the packed float GEMMs (avx2/float_matmul_avx2.cpp, avx512/
// float_matmul_avx512.cpp): weight rows transposed, 8 x 8 at a time in 256-bit registers, into
// f32 panels [kc][NR] per NR output columns, as the broadcast-FMA micro-kernels read them.
// Included after float_matmul_inl.h (its element formats) in a TU compiled for AVX2 or AVX-512.
#pragma once

#include <type_traits>

#include "engine/kernels/x86/float_matmul_inl.h"

namespace vlmd::engine::kernels::VLMD_X86_NS {

// 8 values of element format E as f32 (256-bit).
template <class E>
inline __m256 LoadE8(const typename E::T* p) {
  if constexpr (std::is_same_v<E, F32Elem>) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (std::is_same_v<E, BF16Elem>) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// In-register 8 x 8 transpose (unpack, shuffle, lane permute).
inline void Transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// Packs weight rows [n, n + nc) x [kb, kb + kc) as f32 panels wp[s][k][NR] (s = column / NR);
// columns past nc are zero so the micro-kernel can always run full width. wp 32-byte aligned.
template <class E, int NR>
void PackWeightPanels(const MatmulArgs& p, int64_t n, int nc, int64_t kb, int kc, float* wp) {
  using T = typename E::T;
  const int n_strips = (nc + NR - 1) / NR;
  const int kc8 = kc - kc % 8;
  for (int s = 0; s < n_strips; ++s) {
    float* panel = wp + static_cast<int64_t>(s) * kc * NR;
    for (int c0 = 0; c0 < NR; c0 += 8) {
      const int col0 = s * NR + c0;
      if (col0 + 8 <= nc) {
        const T* rows[8];
        for (int r = 0; r < 8; ++r) {
          rows[r] = reinterpret_cast<const T*>(p.w + (n + col0 + r) * p.w_row_bytes) + kb;
        }
        for (int k = 0; k < kc8; k += 8) {
          __m256 v[8];
          for (int r = 0; r < 8; ++r) v[r] = LoadE8<E>(rows[r] + k);
          Transpose8(v);
          for (int r = 0; r < 8; ++r) _mm256_store_ps(panel + (k + r) * NR + c0, v[r]);
        }
        for (int k = kc8; k < kc; ++k) {
          for (int r = 0; r < 8; ++r) panel[k * NR + c0 + r] = E::Scalar(rows[r] + k);
        }
      } else {
        for (int r = 0; r < 8; ++r) {
          const int col = col0 + r;
          if (col < nc) {
            const T* row = reinterpret_cast<const T*>(p.w + (n + col) * p.w_row_bytes) + kb;
            for (int k = 0; k < kc; ++k) panel[k * NR + c0 + r] = E::Scalar(row + k);
          } else {
            for (int k = 0; k < kc; ++k) panel[k * NR + c0 + r] = 0.0f;
          }
        }
      }
    }
  }
}

}  // namespace vlmd::engine::kernels::VLMD_X86_NS
