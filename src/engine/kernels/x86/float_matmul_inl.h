// Dot-product-shaped matmul tiles for F32 / F16 / BF16 weights (activations in the same format:
// F32, F16-rounded, BF16-rounded), at the widest float vector of the including ISA: 512-bit when
// compiled with AVX-512F, else 256-bit. Used for decode (few activation rows) on every ISA; the GEMMs
// of many rows are the packed kernels in avx2/ and avx512/.
//
// Numerics: weights and activations are widened exactly to f32 and multiplied-added with FMA into
// kLanes partial sums per output, summed at the end; error <= (k / kLanes + log2 kLanes) u sum|wa|.
#pragma once

#include "engine/kernels/x86/simd_inl.h"

namespace vlmd::engine::kernels::VLMD_X86_NS {

#if defined(__AVX512F__)
using VecF = __m512;
inline constexpr int kLanes = 16;
inline VecF VZero() { return _mm512_setzero_ps(); }
inline void VStore(float* p, VecF v) { _mm512_store_ps(p, v); }  // p 64-byte aligned
inline VecF VFma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline float VSum(VecF v) { return _mm512_reduce_add_ps(v); }
#else
using VecF = __m256;
inline constexpr int kLanes = 8;
inline VecF VZero() { return _mm256_setzero_ps(); }
inline void VStore(float* p, VecF v) { _mm256_store_ps(p, v); }  // p 32-byte aligned
inline VecF VFma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline float VSum(VecF v) { return HSum(v); }
#endif

// Element formats: Load reads kLanes values as f32, Scalar one value.
struct F32Elem {
  using T = float;
  static VecF Load(const T* p) {
#if defined(__AVX512F__)
    return _mm512_loadu_ps(p);
#else
    return _mm256_loadu_ps(p);
#endif
  }
  static float Scalar(const T* p) { return *p; }
};

struct F16Elem {
  using T = uint16_t;
  static VecF Load(const T* p) {
#if defined(__AVX512F__)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#else
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
  }
  static float Scalar(const T* p) { return HalfToFloat(*p); }
};

// bf16 is the top half of an f32: widen to 32 bits and shift.
struct BF16Elem {
  using T = uint16_t;
  static VecF Load(const T* p) {
#if defined(__AVX512F__)
    const __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
#else
    const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
#endif
  }
  static float Scalar(const T* p) {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

template <class E>
struct FloatDotKernel {
  using T = typename E::T;
  template <int MR, int NR>
  static void Tile(const MatmulArgs& p, int64_t m, int64_t n) {
    const T* w[NR];
    const T* a[MR];
    for (int j = 0; j < NR; ++j) w[j] = reinterpret_cast<const T*>(p.w + (n + j) * p.w_row_bytes);
    for (int i = 0; i < MR; ++i) a[i] = reinterpret_cast<const T*>(p.a + (m + i) * p.a_row_bytes);
    VecF acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = VZero();
    const int64_t kv = p.k - p.k % kLanes;
    for (int64_t k = 0; k < kv; k += kLanes) {
      VecF av[MR];
      for (int i = 0; i < MR; ++i) av[i] = E::Load(a[i] + k);
      for (int j = 0; j < NR; ++j) {
        const VecF wv = E::Load(w[j] + k);
        for (int i = 0; i < MR; ++i) acc[i][j] = VFma(av[i], wv, acc[i][j]);
      }
    }
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) {
        float s = VSum(acc[i][j]);
        for (int64_t k = kv; k < p.k; ++k) s += E::Scalar(a[i] + k) * E::Scalar(w[j] + k);
        p.out[(m + i) * p.out_stride + n + j] = s;
      }
    }
  }
};

#if defined(__AVX512F__)
inline constexpr int kFGemmMR = 4, kFGemmNR = 4;
#else
inline constexpr int kFGemmMR = 3, kFGemmNR = 3;
#endif
inline constexpr int kFGemvNR = 4;

template <class E>
void FloatDotMatmul(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  MatmulEntry<FloatDotKernel<E>, kFGemvNR, kFGemmMR, kFGemmNR>(p, m0, m1, n0, n1);
}

}  // namespace vlmd::engine::kernels::VLMD_X86_NS
