// AVX2 F32 / F16 / BF16 matmul. Few activation rows: the dot-product tiles of float_matmul_inl.h
// (memory bound, weights streamed once). Many rows: a packed, cache-blocked GEMM with a 6 x 16
// register tile, the AVX2 form of avx512/float_matmul_avx512.cpp's (same blocking, same packing).
//
// Tiling (GEMM): 6 x 16 holds 12 ymm accumulators + 2 weight vectors + 1 broadcast = 15 of 16
// registers, 12 FMAs per 2 vector loads + 6 broadcasts. Weights are packed (converted to f32)
// into panels [kc][16] per 16 columns (kc = 256: one panel = 16 KiB, L1); an activation tile is
// copied to f32 rows at a fixed stride. The dot tiles, which need a horizontal sum per output,
// ran these products (the encoder's attention, exact-precision prompts) at ~0.5 of the FMA peak.
#define VLMD_X86_NS avx2
#include "engine/kernels/x86/float_matmul_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace avx2 {
namespace {

constexpr int kMR = 6;
constexpr int kNR = 16;
constexpr int kKC = 256;
constexpr int kNC = 128;
// Below this many rows the packing does not pay for itself: use the dot tiles.
constexpr int64_t kPackedMinRows = 8;

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

// Packs weight rows [n, n + nc) x [kb, kb + kc) as f32 panels wp[s][k][16] (s = column / 16);
// columns past nc are zero so the micro-kernel can always run full width.
template <class E>
void PackW(const MatmulArgs& p, int64_t n, int nc, int64_t kb, int kc, float* wp) {
  using T = typename E::T;
  const int n_strips = (nc + kNR - 1) / kNR;
  const int kc8 = kc - kc % 8;
  for (int s = 0; s < n_strips; ++s) {
    float* panel = wp + static_cast<int64_t>(s) * kc * kNR;
    for (int c0 = 0; c0 < kNR; c0 += 8) {
      const int col0 = s * kNR + c0;
      if (col0 + 8 <= nc) {
        const T* rows[8];
        for (int r = 0; r < 8; ++r) {
          rows[r] = reinterpret_cast<const T*>(p.w + (n + col0 + r) * p.w_row_bytes) + kb;
        }
        for (int k = 0; k < kc8; k += 8) {
          __m256 v[8];
          for (int r = 0; r < 8; ++r) v[r] = E::Load(rows[r] + k);
          Transpose8(v);
          for (int r = 0; r < 8; ++r) _mm256_store_ps(panel + (k + r) * kNR + c0, v[r]);
        }
        for (int k = kc8; k < kc; ++k) {
          for (int r = 0; r < 8; ++r) panel[k * kNR + c0 + r] = E::Scalar(rows[r] + k);
        }
      } else {
        for (int r = 0; r < 8; ++r) {
          const int col = col0 + r;
          if (col < nc) {
            const T* row = reinterpret_cast<const T*>(p.w + (n + col) * p.w_row_bytes) + kb;
            for (int k = 0; k < kc; ++k) panel[k * kNR + c0 + r] = E::Scalar(row + k);
          } else {
            for (int k = 0; k < kc; ++k) panel[k * kNR + c0 + r] = 0.0f;
          }
        }
      }
    }
  }
}

// Copies activation rows [m, m + mr) x [kb, kb + kc) as f32 rows ap[i * kKC + k].
template <class E>
void PackA(const MatmulArgs& p, int64_t m, int mr, int64_t kb, int kc, float* ap) {
  using T = typename E::T;
  for (int i = 0; i < mr; ++i) {
    const T* row = reinterpret_cast<const T*>(p.a + (m + i) * p.a_row_bytes) + kb;
    float* dst = ap + i * kKC;
    int k = 0;
    for (; k + kLanes <= kc; k += kLanes) _mm256_store_ps(dst + k, E::Load(row + k));
    for (; k < kc; ++k) dst[k] = E::Scalar(row + k);
  }
}

// Lane masks of the first `cols` of 8 columns (maskload / maskstore).
inline __m256i ColumnMask(int cols) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols < 0 ? 0 : cols), lane);
}

// c[0..MR) x [0..16) (+)= ap wp over kc (ap rows at stride kKC); `cols` valid columns.
template <int MR>
void MicroKernel(const float* ap, const float* wp, int kc, float* c, int64_t ldc, int cols,
                 bool accumulate) {
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m256 w0 = _mm256_load_ps(wp + k * kNR);
    const __m256 w1 = _mm256_load_ps(wp + k * kNR + 8);
  #pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(ap + i * kKC + k);
      c0[i] = _mm256_fmadd_ps(a, w0, c0[i]);
      c1[i] = _mm256_fmadd_ps(a, w1, c1[i]);
    }
  }
  // One store path for full and partial widths (masks of all ones when full): with a separate
  // unmasked branch GCC kept the accumulators in memory inside the k loop (half the FMA rate).
  const __m256i mask0 = ColumnMask(cols), mask1 = ColumnMask(cols - 8);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      c0[i] = _mm256_add_ps(c0[i], _mm256_maskload_ps(row, mask0));
      c1[i] = _mm256_add_ps(c1[i], _mm256_maskload_ps(row + 8, mask1));
    }
    _mm256_maskstore_ps(row, mask0, c0[i]);
    _mm256_maskstore_ps(row + 8, mask1, c1[i]);
  }
}

using MicroFn = void (*)(const float*, const float*, int, float*, int64_t, int, bool);
template <int... I>
constexpr std::array<MicroFn, sizeof...(I)> MakeMicro(std::integer_sequence<int, I...>) {
  return {&MicroKernel<I + 1>...};
}
constexpr std::array<MicroFn, kMR> kMicro = MakeMicro(std::make_integer_sequence<int, kMR>());

template <class E>
void PackedGemm(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  alignas(64) float wp[kKC * kNC];  // [strip][kc][16]
  alignas(64) float ap[kMR * kKC];  // [mr][kKC]
  for (int64_t nb = n0; nb < n1; nb += kNC) {
    const int nc = static_cast<int>(n1 - nb < kNC ? n1 - nb : kNC);
    for (int64_t kb = 0; kb < p.k; kb += kKC) {
      const int kc = static_cast<int>(p.k - kb < kKC ? p.k - kb : kKC);
      PackW<E>(p, nb, nc, kb, kc, wp);
      for (int64_t m = m0; m < m1; m += kMR) {
        const int mr = static_cast<int>(m1 - m < kMR ? m1 - m : kMR);
        PackA<E>(p, m, mr, kb, kc, ap);
        for (int s = 0; s * kNR < nc; ++s) {
          kMicro[mr - 1](ap, wp + static_cast<int64_t>(s) * kc * kNR, kc,
                         p.out + m * p.out_stride + nb + s * kNR, p.out_stride, nc - s * kNR,
                         kb > 0);
        }
      }
    }
  }
}

template <class E>
void FloatMatmul(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 - m0 >= kPackedMinRows) {
    PackedGemm<E>(p, m0, m1, n0, n1);
  } else {
    FloatDotMatmul<E>(p, m0, m1, n0, n1);
  }
}

}  // namespace
}  // namespace avx2

void FillAvx2FloatMatmul(KernelTable* t) {
  t->matmul[static_cast<int>(DType::kF32)] = &avx2::FloatMatmul<avx2::F32Elem>;
  t->matmul[static_cast<int>(DType::kF16)] = &avx2::FloatMatmul<avx2::F16Elem>;
  t->matmul[static_cast<int>(DType::kBF16)] = &avx2::FloatMatmul<avx2::BF16Elem>;
  t->act_type[static_cast<int>(DType::kF32)] = DType::kF32;
  t->act_type[static_cast<int>(DType::kF16)] = DType::kF16;
  t->act_type[static_cast<int>(DType::kBF16)] = DType::kBF16;
}

}  // namespace vlmd::engine::kernels
