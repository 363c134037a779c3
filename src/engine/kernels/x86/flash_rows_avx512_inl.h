// The AVX-512 row steps of the flash attention driver (flash_attention_inl.h: Rows), and the
// exp2 and bf16 rounding they share with the bf16 row kernels (bf16_rows_inl.h).
//
// Include only from translation units compiled with AVX-512 F/BW/DQ/VL (x86/avx512 and above);
// the bf16 roundings use vcvtneps2bf16 where the unit is compiled with AVX512-BF16.
#pragma once

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined in the driver and in the kernels that include it:
// a known false positive of the header, silenced here for every includer.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/kernels/flash_attention_inl.h"

namespace vlmd::engine::kernels::flash {
namespace {  // internal linkage: see flash_attention_inl.h

inline constexpr float kLowest = -150.0f;  // clamp of Exp2NonPositive's argument (gives 0)

// 2^t = 2^f * 2^floor(t), f = t - floor(t) in [0, 1) (vreduceps), 2^f from a degree-4 minimax
// polynomial (relative error < 2.6e-6), 2^floor(t) applied by vscalefps (which floors t itself).
// Meant for t <= 0 (softmax terms; the fused attention also passes t up to 8, which is as exact).
// t is clamped at `lowest` (-inf would make f NaN); a NaN passes through (vmaxps returns its
// second operand when either is NaN, and the flush below keeps unordered lanes).
// Below t = -126 the result is 0, never a denormal: a denormal result, and every later add or
// multiply that reads it, takes a microcode assist of ~100+ cycles on Intel cores. The GELU of
// the tile epilogue hit that for pre-activations between about -12 and -9 (an FFN up projection
// with GELU measured 3.7x slower than without, vlmd_bench_matmul gemm_tiles), and so would an
// attention row whose scores spread over more than 126 (log2 units). The AVX2 Exp2Avx2 gives 0
// there too.
inline __m512 Exp2NonPositive(__m512 t, float lowest) {
  t = _mm512_max_ps(_mm512_set1_ps(lowest), t);
  const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF);
  __m512 p = _mm512_set1_ps(0.0135341605f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.0520114748f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.241442748f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.693003836f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.00000259f));
  const __mmask16 normal = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(normal, p, t);
}

// 16 floats -> bf16, round to nearest even, NaN made quiet. Without AVX512-BF16, F32ToBF16's
// integer steps (bit for bit); with it, its instruction, which differs from them only in reading
// denormal inputs as zero.
inline __m256i RoundToBf16(__m512 x) {
#if defined(__AVX512BF16__)
  const __m256bh b = _mm512_cvtneps_pbh(x);
  __m256i r;
  std::memcpy(&r, &b, sizeof(r));
  return r;
#else
  const __m512i u = _mm512_castps_si512(x);
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
#endif
}

// bf16(a) then bf16(b) to dst[0, 32): the rounding of RoundToBf16.
inline void StorePairBf16(__m512 a, __m512 b, uint16_t* dst) {
#if defined(__AVX512BF16__)
  const __m512bh r = _mm512_cvtne2ps_pbh(b, a);  // b to the upper half
  std::memcpy(dst, &r, sizeof(r));
#else
  const __m256i lo = RoundToBf16(a), hi = RoundToBf16(b);
  std::memcpy(dst, &lo, sizeof(lo));
  std::memcpy(dst + 16, &hi, sizeof(hi));
#endif
}

// Lanes [j, j + 16) that lie in [lo, hi), as a mask.
inline __mmask16 LanesIn(int64_t j, int64_t lo, int64_t hi) {
  const int64_t a = std::clamp<int64_t>(lo - j, 0, 16), b = std::clamp<int64_t>(hi - j, 0, 16);
  return static_cast<__mmask16>(((1u << b) - 1u) & ~((1u << a) - 1u));
}

// Rows of 16-lane groups; whole groups from the one holding lo, masked to [lo, hi). With lo = 0
// the operations are those of a whole-row softmax, lane for lane (whole 16-score groups add
// unmasked, as a full mask does).
struct Avx512Rows {
  static float Max(const float* s, int64_t lo, int64_t hi) {
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    const int64_t j0 = hi > lo ? lo / 16 * 16 : 0, j1 = hi > lo ? hi : 0;
    for (int64_t j = j0; j < j1; j += 16) {
      const __mmask16 in = j >= lo && j + 16 <= hi ? __mmask16{0xFFFF} : LanesIn(j, lo, hi);
      vmax = _mm512_mask_max_ps(vmax, in, _mm512_maskz_load_ps(in, s + j), vmax);
    }
    return _mm512_reduce_max_ps(vmax);
  }

  static void Scale(float* o, int64_t n, float alpha) {
    const __m512 va = _mm512_set1_ps(alpha);
    for (int64_t e = 0; e < n; e += 16) {
      _mm512_store_ps(o + e, _mm512_mul_ps(_mm512_load_ps(o + e), va));
    }
  }

  // Rows::Exp of flash_attention_inl.h: with kCheck, false as soon as a score of [lo, hi)
  // exceeds limit. Group g (scores [16g, 16g + 16)) adds to the sum of its parity, whichever loop
  // takes it, so the sum does not depend on where [lo, hi) starts. Where the row's groups are whole
  // (from lo on, when lo is a multiple of 16) they go in unmasked pairs, rounded to bf16 by one
  // instruction per pair where the unit has AVX512-BF16: 1024 x 1024 AMX attention 9-11% faster
  // than one masked group at a time (bench/RESULTS.md, session 31).
  template <bool kCheck>
  static bool Exp(const float* s, int64_t lo, int64_t hi, int64_t nk_pad, float m, float limit,
                  uint16_t* p, float* sum) {
    const int64_t j0 = hi > lo ? lo / 16 * 16 : 0, j1 = hi > lo ? hi : 0;
    const __m512 vm = _mm512_set1_ps(m), vlimit = _mm512_set1_ps(limit);
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();  // the sums of groups 2i, 2i+1
    __mmask16 over = 0;
    std::fill(p, p + j0, uint16_t{0});
    int64_t j = j0;
    if (j0 == lo) {
      __m512 first = _mm512_setzero_ps(), second = _mm512_setzero_ps();  // of each pair
      for (; j + 32 <= j1; j += 32) {
        const __m512 x0 = _mm512_loadu_ps(s + j), x1 = _mm512_loadu_ps(s + j + 16);
        if constexpr (kCheck) {
          over |= _mm512_cmp_ps_mask(x0, vlimit, _CMP_GT_OQ) |
                  _mm512_cmp_ps_mask(x1, vlimit, _CMP_GT_OQ);
        }
        const __m512 e0 = Exp2NonPositive(_mm512_sub_ps(x0, vm), kLowest);
        const __m512 e1 = Exp2NonPositive(_mm512_sub_ps(x1, vm), kLowest);
        first = _mm512_add_ps(first, e0);
        second = _mm512_add_ps(second, e1);
        StorePairBf16(e0, e1, p + j);
      }
      const bool starts_odd = (j0 / 16) % 2 != 0;
      even = starts_odd ? second : first;
      odd = starts_odd ? first : second;
    }
    for (; j < j1; j += 16) {
      const __mmask16 in = j >= lo && j + 16 <= hi ? __mmask16{0xFFFF} : LanesIn(j, lo, hi);
      const __m512 x = _mm512_maskz_load_ps(in, s + j);
      if constexpr (kCheck) over |= _mm512_mask_cmp_ps_mask(in, x, vlimit, _CMP_GT_OQ);
      const __m512 e = Exp2NonPositive(_mm512_sub_ps(x, vm), kLowest);
      if ((j / 16) % 2 == 0) {
        even = _mm512_mask_add_ps(even, in, even, e);
      } else {
        odd = _mm512_mask_add_ps(odd, in, odd, e);
      }
      const __m256i b = RoundToBf16(_mm512_maskz_mov_ps(in, e));
      std::memcpy(p + j, &b, sizeof(b));  // zeros outside [lo, hi)
    }
    if (over != 0) return false;
    std::fill(p + std::max(j0, (j1 + 15) / 16 * 16), p + nk_pad, uint16_t{0});
    *sum = _mm512_reduce_add_ps(_mm512_add_ps(even, odd));
    return true;
  }

  static void Store(const float* o, float inv, int64_t n, uint16_t* out) {
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t e = 0; e < n; e += 16) {
      const __mmask16 mask = e + 16 <= n ? __mmask16{0xFFFF}
                                         : static_cast<__mmask16>((1u << (n - e)) - 1u);
      _mm256_mask_storeu_epi16(out + e, mask, RoundToBf16(_mm512_mul_ps(_mm512_load_ps(o + e),
                                                                        vinv)));
    }
  }
};

}  // namespace
}  // namespace vlmd::engine::kernels::flash
