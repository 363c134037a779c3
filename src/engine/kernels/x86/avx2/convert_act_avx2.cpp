// AVX2 f32 -> activation-format converters (Q8_0 with or without its block sums, Q8_1, Q8_K,
// F16). They must produce the same bytes as the reference activation quantizers
// (engine/tensor/quantize.h, FindActivationQuantizeFn: ggml-cpu x86 semantics), so that every
// ISA computes on identical quantized activations:
//   Q8_0/Q8_1: d = f16(amax / 127), q = nearest-even(x * (127 / amax)), saturated to int8;
//   Q8_K:      iscale = -127 / x_at_first_amax, q = nearest-even(iscale * x), d = 1 / iscale;
//   F16:       round to nearest even (BF16: avx2/bf16_rows_avx2.cpp).
#define VLMD_X86_NS avx2
#include "engine/kernels/q8_0_row_inl.h"
#include "engine/kernels/x86/simd_inl.h"
#include "engine/kernels/x86/x86_fill.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels {
namespace avx2 {
namespace {

// (No namespace-scope vector constants: their static initializers would run AVX code at start-up
// on CPUs that lack it.)
inline __m256 SignBit() { return _mm256_set1_ps(-0.0f); }
inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(SignBit(), v); }

inline float HMax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// Packs 4 x 8 int32 (each in [-128, 127]) into 32 int8 in order.
inline __m256i PackI8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline int32_t HSumI32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
  return _mm_cvtsi128_si32(x);
}

// One 32-element block: returns the 4 int32 vectors of q and sets *d (f32, before f16 rounding).
inline void QuantizeBlock32(const float* x, __m256i q[4], float* d_out) {
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(Abs(v[0]), Abs(v[1])),
                                 _mm256_max_ps(Abs(v[2]), Abs(v[3])));
  const float amax = HMax(m);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  // cvtps rounds with MXCSR's default mode, nearest-even; packs saturates to [-128, 127].
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));
  *d_out = amax / 127.0f;
}

inline uint16_t FloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// kSums: also sums[b], the sum of block b's stored quants (KernelTable::convert_q8_0_sums).
template <bool kSums>
void ConvertQ8_0Blocks(const float* x, void* y, int32_t* sums, int64_t k) {
  auto* out = static_cast<BlockQ8_0*>(y);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    __m256i q[4];
    float d;
    QuantizeBlock32(x + b * kQK8_0, q, &d);
    out[b].d = FloatToHalf(d);
    const __m256i packed = PackI8(q[0], q[1], q[2], q[3]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), packed);
    if constexpr (kSums) {  // 1 x q summed in int16 pairs, then int32: exact for any int8
      sums[b] = HSumI32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, packed), ones16));
    }
  }
}

void ConvertQ8_0(const float* x, void* y, int64_t k) {
  ConvertQ8_0Blocks<false>(x, y, nullptr, k);
}
void ConvertQ8_0Sums(const float* x, void* y, int32_t* sums, int64_t k) {
  ConvertQ8_0SumsRow(x, y, sums, k, ConvertQ8_0Blocks<true>);
}

void ConvertQ8_1(const float* x, void* y, int64_t k) {
  auto* out = static_cast<BlockQ8_1*>(y);
  for (int64_t b = 0; b < k / kQK8_0; ++b) {
    __m256i q[4];
    float d;
    QuantizeBlock32(x + b * kQK8_0, q, &d);
    const int32_t sum =
        HSumI32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    out[b].d = FloatToHalf(d);
    out[b].s = FloatToHalf(static_cast<float>(sum) * d);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), PackI8(q[0], q[1], q[2], q[3]));
  }
}

void ConvertQ8_K(const float* x, void* y, int64_t k) {
  auto* out = static_cast<BlockQ8_K*>(y);
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    BlockQ8_K& o = out[b];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < kQK_K; i += 8) m = _mm256_max_ps(m, Abs(_mm256_loadu_ps(xb + i)));
    const float amax = HMax(m);
    if (amax == 0.0f) {
      std::memset(&o, 0, sizeof(o));
      continue;
    }
    // The reference keeps the signed value of the FIRST element reaching amax.
    float max = 0.0f;
    const __m256 amax_v = _mm256_set1_ps(amax);
    for (int i = 0; i < kQK_K; i += 8) {
      const int hit = _mm256_movemask_ps(
          _mm256_cmp_ps(Abs(_mm256_loadu_ps(xb + i)), amax_v, _CMP_EQ_OQ));
      if (hit != 0) {
        max = xb[i + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int g = 0; g < kQK_K / 32; ++g) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {
        // cvtps uses the MXCSR rounding mode: nearest-even, as the reference's nearest_int().
        q[i] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(xb + 32 * g + 8 * i))), cap);
      }
      o.bsums[2 * g] = static_cast<int16_t>(HSumI32(_mm256_add_epi32(q[0], q[1])));
      o.bsums[2 * g + 1] = static_cast<int16_t>(HSumI32(_mm256_add_epi32(q[2], q[3])));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs + 32 * g), PackI8(q[0], q[1], q[2], q[3]));
    }
    o.d = 1.0f / iscale;
  }
}

void ConvertF16(const float* x, void* y, int64_t k) {
  auto* out = static_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < k; ++i) out[i] = FloatToHalf(x[i]);
}

}  // namespace
}  // namespace avx2

void FillAvx2Converters(KernelTable* t) {
  t->convert_act[static_cast<int>(DType::kQ8_0)] = &avx2::ConvertQ8_0;
  t->convert_act[static_cast<int>(DType::kQ8_1)] = &avx2::ConvertQ8_1;
  t->convert_act[static_cast<int>(DType::kQ8_K)] = &avx2::ConvertQ8_K;
  t->convert_act[static_cast<int>(DType::kF16)] = &avx2::ConvertF16;
  // (kBF16: the bf16 row kernels' ToBf16, avx2/bf16_rows_avx2.cpp.)
  t->convert_q8_0_sums = &avx2::ConvertQ8_0Sums;
}

}  // namespace vlmd::engine::kernels
