// AVX2 F32 / F16 / BF16 matmul. Few activation rows: the dot-product tiles of float_matmul_inl.h
// (memory bound, weights streamed once). Many rows: a packed, cache-blocked GEMM with a 6 x 16
// register tile over the packing and driver it shares with AVX-512 (float_gemm_inl.h).
//
// Tiling (GEMM): 6 x 16 holds 12 ymm accumulators + 2 weight vectors + 1 broadcast = 15 of 16
// registers, 12 FMAs per 2 vector loads + 6 broadcasts. Weights are packed (converted to f32)
// into panels [kc][16] per 16 columns (kc = 256: one panel = 16 KiB, L1); an activation tile is
// copied to f32 rows at a fixed stride. The dot tiles, which need a horizontal sum per output,
// ran these products (the encoder's attention, exact-precision prompts) at ~0.5 of the FMA peak.
#define VLMD_X86_NS avx2
#include "engine/kernels/x86/float_gemm_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace avx2 {
namespace {

constexpr int kNR = 16;
constexpr int kKC = 256;

// Lane masks of the first `cols` of 8 columns (maskload / maskstore).
inline __m256i ColumnMask(int cols) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols < 0 ? 0 : cols), lane);
}

// c[0..MR) x [0..16) (+)= ap wp over kc (ap rows at stride kKC); the first `cols` columns.
// GCC kept the accumulator arrays in memory inside the k loop (half the FMA rate) unless the
// loops over them are unrolled.
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
  // One store path for full and partial widths (masks of all ones when full).
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

struct Gemm {
  static constexpr int kMR = 6, kNR = avx2::kNR, kKC = avx2::kKC, kNC = 128;
  static constexpr auto kMicro =
      TileTable<kMR, 1>([]<int MR, int>() -> FloatMicroFn { return &MicroKernel<MR>; });
};

}  // namespace
}  // namespace avx2

void FillAvx2FloatMatmul(KernelTable* t) {
  t->matmul[static_cast<int>(DType::kF32)] = &avx2::FloatMatmul<avx2::F32Elem, avx2::Gemm>;
  t->matmul[static_cast<int>(DType::kF16)] = &avx2::FloatMatmul<avx2::F16Elem, avx2::Gemm>;
  t->matmul[static_cast<int>(DType::kBF16)] = &avx2::FloatMatmul<avx2::BF16Elem, avx2::Gemm>;
  t->act_type[static_cast<int>(DType::kF32)] = DType::kF32;
  t->act_type[static_cast<int>(DType::kF16)] = DType::kF16;
  t->act_type[static_cast<int>(DType::kBF16)] = DType::kBF16;
}

}  // namespace vlmd::engine::kernels
