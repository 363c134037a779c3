// The packed float GEMM of the AVX2 and AVX-512 tables (avx2/float_matmul_avx2.cpp,
// avx512/float_matmul_avx512.cpp), which differ only in their micro-kernel and its tile: weight
// rows transposed, 8 x 8 at a time in 256-bit registers, into f32 panels [kc][NR] per NR output
// columns (a weight block of kNC columns x kKC, packed once per k-step and reused by every
// kMR-row tile of the call's rows), activation rows copied to f32 at a fixed stride kKC (one
// address register for all of a tile's broadcasts), and the micro-kernel over each strip.
// Included in a TU compiled for AVX2 or AVX-512 (VLMD_X86_NS).
#pragma once

#include <array>
#include <type_traits>

#include "engine/kernels/x86/float_matmul_inl.h"
#include "engine/kernels/tile_table_inl.h"

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

// Copies activation rows [m, m + mr) x [kb, kb + kc) as f32 rows ap[i * kKC + k] (ap aligned).
template <class E, int kKC>
void PackActivationRows(const MatmulArgs& p, int64_t m, int mr, int64_t kb, int kc, float* ap) {
  using T = typename E::T;
  for (int i = 0; i < mr; ++i) {
    const T* row = reinterpret_cast<const T*>(p.a + (m + i) * p.a_row_bytes) + kb;
    float* dst = ap + i * kKC;
    int k = 0;
    for (; k + kLanes <= kc; k += kLanes) VStore(dst + k, E::Load(row + k));
    for (; k < kc; ++k) dst[k] = E::Scalar(row + k);
  }
}

// A micro-kernel: c[0..mr) x [0..NR) (+)= ap wp over kc (ap rows at stride kKC, wp one panel),
// only the first `cols` columns written (cols may exceed NR: all); `accumulate` adds to c.
using FloatMicroFn = void (*)(const float* ap, const float* wp, int kc, float* c, int64_t ldc,
                              int cols, bool accumulate);

// Below this many rows the packing does not pay for itself: the dot tiles run instead.
inline constexpr int64_t kPackedMinRows = 8;

// The GEMM of output rows [m0, m1) x columns [n0, n1). G: the ISA's tile (kMR, kNR, kKC, kNC)
// and its micro-kernels by row count, G::kMicro[mr - 1].
template <class E, class G>
void PackedFloatGemm(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  alignas(64) float wp[G::kKC * G::kNC];  // [strip][kc][kNR]
  alignas(64) float ap[G::kMR * G::kKC];  // [mr][kKC]
  for (int64_t nb = n0; nb < n1; nb += G::kNC) {
    const int nc = static_cast<int>(n1 - nb < G::kNC ? n1 - nb : G::kNC);
    for (int64_t kb = 0; kb < p.k; kb += G::kKC) {
      const int kc = static_cast<int>(p.k - kb < G::kKC ? p.k - kb : G::kKC);
      PackWeightPanels<E, G::kNR>(p, nb, nc, kb, kc, wp);
      for (int64_t m = m0; m < m1; m += G::kMR) {
        const int mr = static_cast<int>(m1 - m < G::kMR ? m1 - m : G::kMR);
        PackActivationRows<E, G::kKC>(p, m, mr, kb, kc, ap);
        for (int s = 0; s * G::kNR < nc; ++s) {
          G::kMicro[mr - 1](ap, wp + static_cast<int64_t>(s) * kc * G::kNR, kc,
                            p.out + m * p.out_stride + nb + s * G::kNR, p.out_stride,
                            nc - s * G::kNR, kb > 0);
        }
      }
    }
  }
}

// The table's F32 / F16 / BF16 matmul: the packed GEMM for many rows, the dot tiles for few.
template <class E, class G>
void FloatMatmul(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 - m0 >= kPackedMinRows) {
    PackedFloatGemm<E, G>(p, m0, m1, n0, n1);
  } else {
    FloatDotMatmul<E>(p, m0, m1, n0, n1);
  }
}

}  // namespace vlmd::engine::kernels::VLMD_X86_NS
