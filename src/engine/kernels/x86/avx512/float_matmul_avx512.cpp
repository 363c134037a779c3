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
#include "engine/kernels/x86/float_gemm_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace avx512 {
namespace {

constexpr int kNR = 32;
constexpr int kKC = 256;

inline __mmask16 ColumnMask(int cols) {
  if (cols <= 0) return 0;
  return cols >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
}

// c[0..MR) x [0..32) (+)= ap wp over kc (ap rows at stride kKC); the first `cols` columns.
template <int MR>
void MicroKernel(const float* ap, const float* wp, int kc, float* c, int64_t ldc, int cols,
                 bool accumulate) {
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
  const __mmask16 mask0 = ColumnMask(cols), mask1 = ColumnMask(cols - 16);
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

struct Gemm {
  static constexpr int kMR = 14, kNR = avx512::kNR, kKC = avx512::kKC, kNC = 128;
  static constexpr auto kMicro =
      TileTable<kMR, 1>([]<int MR, int>() -> FloatMicroFn { return &MicroKernel<MR>; });
};

}  // namespace
}  // namespace avx512

void FillAvx512FloatMatmul(KernelTable* t) {
  t->matmul[static_cast<int>(DType::kF32)] = &avx512::FloatMatmul<avx512::F32Elem, avx512::Gemm>;
  t->matmul[static_cast<int>(DType::kF16)] = &avx512::FloatMatmul<avx512::F16Elem, avx512::Gemm>;
  t->matmul[static_cast<int>(DType::kBF16)] = &avx512::FloatMatmul<avx512::BF16Elem, avx512::Gemm>;
  t->act_type[static_cast<int>(DType::kF32)] = DType::kF32;
  t->act_type[static_cast<int>(DType::kF16)] = DType::kF16;
  t->act_type[static_cast<int>(DType::kBF16)] = DType::kBF16;
}

}  // namespace vlmd::engine::kernels
