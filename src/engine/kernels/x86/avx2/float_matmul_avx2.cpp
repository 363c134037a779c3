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
#include "engine/kernels/x86/float_gemm_pack_inl.h"
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
      PackWeightPanels<E, kNR>(p, nb, nc, kb, kc, wp);
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
