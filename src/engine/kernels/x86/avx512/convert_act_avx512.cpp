// AVX-512 Q8_0 activation converters, with and without the block sums of the packed matmul
// (KernelTable::convert_q8_0_sums): the bytes of the reference quantizer, as the AVX2 ones
// (avx2/convert_act_avx2.cpp: d = f16(amax / 127), q = nearest-even(x * (127 / amax)),
// saturated to int8), one 32-value block as two 512-bit vectors.

// GCC 12's avx512fintrin.h builds the extracts and narrowing conversions from an undefined
// vector, which -Wmaybe-uninitialized reports once inlined: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "engine/kernels/q8_0_row_inl.h"
#include "engine/kernels/x86/x86_fill.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels {
namespace {

inline float HMax16(__m512 v) {
  const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

inline int32_t HSum16(__m512i v) {
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1)));
}

// kSums: also sums[b], the sum of block b's stored (saturated) quants.
template <bool kSums>
void ConvertBlocks(const float* x, void* y, int32_t* sums, int64_t k) {
  auto* out = static_cast<BlockQ8_0*>(y);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * kQK8_0), v1 = _mm512_loadu_ps(x + b * kQK8_0 + 16);
    const float amax =
        HMax16(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    // vcvtps2dq rounds with MXCSR's default mode, nearest-even; vpmovsdb saturates to int8.
    const __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id)));
    const __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id)));
    out[b].d = static_cast<uint16_t>(
        _cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), q0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), q1);
    if constexpr (kSums) {
      sums[b] = HSum16(_mm512_add_epi32(_mm512_cvtepi8_epi32(q0), _mm512_cvtepi8_epi32(q1)));
    }
  }
}

void ConvertQ8_0(const float* x, void* y, int64_t k) { ConvertBlocks<false>(x, y, nullptr, k); }
void ConvertQ8_0Sums(const float* x, void* y, int32_t* sums, int64_t k) {
  ConvertQ8_0SumsRow(x, y, sums, k, ConvertBlocks<true>);
}

}  // namespace

void FillAvx512Converters(KernelTable* t) {
  t->convert_act[static_cast<int>(DType::kQ8_0)] = ConvertQ8_0;
  t->convert_q8_0_sums = ConvertQ8_0Sums;
}

}  // namespace vlmd::engine::kernels
