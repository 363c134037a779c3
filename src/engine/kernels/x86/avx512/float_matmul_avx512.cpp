// AVX-512 F32 / F16 / BF16 matmul. Few activation rows: the dot-product tiles of
// float_matmul_inl.h (memory bound, weights streamed once). Many rows: a packed, cache-blocked
// GEMM with a 14 x 32 register tile, which is compute bound and needs the packing to get there.
//
// Tiling (GEMM): the FMA unit needs >= latency (4) x pipes (2) independent accumulators; a 14 x 32
// tile holds 28 zmm accumulators + 2 weight vectors + 1 broadcast = 31 of 32 registers, and does
// 28 FMAs per 2 vector loads + 14 broadcasts. Weights are packed (converted to f32) into panels
// [kc][32] per 32 columns (kc = 256: one panel = 32 KiB, L1). An activation tile is copied to f32
// rows at a fixed stride, so its 14 broadcasts need one address register. The weight block packed
// once per k-step (kNC columns x kc, 128 KiB, L2) is reused by every 14-row tile of the call's rows,
// so the driver gives this kernel many rows per call to amortize the transposing pack.
#define VLMD_X86_NS avx512
// GCC 12 reports its own _mm512_reduce_add_ps / extract helpers as reading uninitialized values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "engine/kernels/x86/float_gemm_pack_inl.h"
#include "engine/kernels/x86/float_matmul_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace avx512 {
namespace {

constexpr int kMR = 14;
constexpr int kNR = 32;
constexpr int kKC = 256;
constexpr int kNC = 128;
// Below this many rows the packing does not pay for itself: use the dot tiles.
constexpr int64_t kPackedMinRows = 8;

// Copies activation rows [m, m + mr) x [kb, kb + kc) as f32 rows ap[i * kKC + k]: a fixed row
// stride lets the micro-kernel address all 14 broadcasts from one register with immediate offsets,
// and the copy stays a vectorized row conversion (no transpose).
template <class E>
void PackA(const MatmulArgs& p, int64_t m, int mr, int64_t kb, int kc, float* ap) {
  using T = typename E::T;
  for (int i = 0; i < mr; ++i) {
    const T* row = reinterpret_cast<const T*>(p.a + (m + i) * p.a_row_bytes) + kb;
    float* dst = ap + i * kKC;
    int k = 0;
    for (; k + kLanes <= kc; k += kLanes) _mm512_store_ps(dst + k, E::Load(row + k));
    for (; k < kc; ++k) dst[k] = E::Scalar(row + k);
  }
}

// c[0..MR) x [0..32) (+)= ap wp over kc (ap rows at stride kKC); masks select the valid columns of the two halves.
template <int MR>
void MicroKernel(const float* ap, const float* wp, int kc, float* c, int64_t ldc, __mmask16 mask0,
                 __mmask16 mask1, bool accumulate) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m512 w0 = _mm512_load_ps(wp + k * kNR);
    const __m512 w1 = _mm512_load_ps(wp + k * kNR + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(ap[i * kKC + k]);
      c0[i] = _mm512_fmadd_ps(a, w0, c0[i]);
      c1[i] = _mm512_fmadd_ps(a, w1, c1[i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(mask0, row));
      c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(mask1, row + 16));
    }
    _mm512_mask_storeu_ps(row, mask0, c0[i]);
    _mm512_mask_storeu_ps(row + 16, mask1, c1[i]);
  }
}

using MicroFn = void (*)(const float*, const float*, int, float*, int64_t, __mmask16, __mmask16, bool);
template <int... I>
constexpr std::array<MicroFn, sizeof...(I)> MakeMicro(std::integer_sequence<int, I...>) {
  return {&MicroKernel<I + 1>...};
}
constexpr std::array<MicroFn, kMR> kMicro = MakeMicro(std::make_integer_sequence<int, kMR>());

inline __mmask16 ColumnMask(int cols) {
  if (cols <= 0) return 0;
  return cols >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
}

template <class E>
void PackedGemm(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  alignas(64) float wp[kKC * kNC];  // [strip][kc][32]
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
          const int cols = nc - s * kNR;
          kMicro[mr - 1](ap, wp + static_cast<int64_t>(s) * kc * kNR, kc,
                         p.out + m * p.out_stride + nb + s * kNR, p.out_stride, ColumnMask(cols),
                         ColumnMask(cols - 16), kb > 0);
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
}  // namespace avx512

void FillAvx512FloatMatmul(KernelTable* t) {
  t->matmul[static_cast<int>(DType::kF32)] = &avx512::FloatMatmul<avx512::F32Elem>;
  t->matmul[static_cast<int>(DType::kF16)] = &avx512::FloatMatmul<avx512::F16Elem>;
  t->matmul[static_cast<int>(DType::kBF16)] = &avx512::FloatMatmul<avx512::BF16Elem>;
  t->act_type[static_cast<int>(DType::kF32)] = DType::kF32;
  t->act_type[static_cast<int>(DType::kF16)] = DType::kF16;
  t->act_type[static_cast<int>(DType::kBF16)] = DType::kBF16;
}

}  // namespace vlmd::engine::kernels
