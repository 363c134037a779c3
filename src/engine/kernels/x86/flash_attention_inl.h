// The flash-style attention of one head (tile_bf16.h, TileAttentionArgs) shared by the AMX tile
// kernel, the AVX512-BF16 one and the AVX-512 FMA one: the driver (query blocks of 32 rows, keys
// in chunks of kChunk), the online softmax and the final normalization. Only the two products
// differ, and are the caller's:
//   score(a, q, p0, panels, s): S = Q K^T for 32 query rows (q) x the 16-key panels
//     [p0, p0 + panels), into the f32 block s (32 rows of kSStride);
//   accumulate(a, p, k0, steps, o, o_stride): O rows [0, 32) += P (32 rows of kPStride bf16
//     probabilities, 32 * steps keys) x V^T's panels for keys [k0, k0 + 32 * steps).
// Per chunk: 1. S for the chunk, in L1. 2. Online softmax per row in base 2: a reference m (the
// running max, moved only when a chunk exceeds it by more than kSlack), running sum l; the
// block's probabilities 2^(s - m) rounded to bf16 into P; the f32 output rows O rescaled by
// 2^(m_old - m_new) when m moves. 3. O += P V. At the end O / l is written as bf16. Nothing of
// size n_q x n_kv exists. With key ranges (causal mask, sliding window), a block starts at the
// chunk of its first visible key and stops at its last one, and each row's softmax counts only
// its own keys (the rest of the chunk gets probability 0; a chunk with none leaves it as it was).
//
// Include only from translation units compiled with AVX-512 F/BW/DQ/VL (x86/avx512 and above);
// the bf16 roundings use vcvtneps2bf16 where the unit is compiled with AVX512-BF16.
#pragma once

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined in this driver and in the kernels that include it:
// a known false positive of the header, silenced here for every includer.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels::flash {
// Internal linkage: the including translation units are compiled with different ISA flags, and
// one linker-chosen copy of an inline function must not run where its ISA is missing.
namespace {

inline constexpr int64_t kChunk = kTileAttentionChunk;  // keys per chunk: 8 panels
inline constexpr int64_t kSStride = kChunk + 16;  // f32 score rows: off the 4 KiB set stride
inline constexpr int64_t kPStride = kChunk + 32;  // bf16 probability rows
inline constexpr float kLowest = -150.0f;         // 2^-150: 0 (or a denormal) against the max
inline constexpr float kSlack = 8.0f;             // probabilities up to 2^8 before a rescale

// 2^t = 2^f * 2^floor(t), f = t - floor(t) in [0, 1) (vreduceps), 2^f from a degree-4 minimax
// polynomial (relative error < 2.6e-6), 2^floor(t) applied by vscalefps (which floors t itself).
// Meant for t <= 0 (softmax terms; the fused attention also passes t up to 8, which is as exact).
// t is clamped at `lowest` (-inf would make f NaN; callers pick a value below which 2^t, then 0
// or a denormal, is negligible for them); a NaN passes through (vmaxps returns its second operand
// when either is NaN).
inline __m512 Exp2NonPositive(__m512 t, float lowest) {
  t = _mm512_max_ps(_mm512_set1_ps(lowest), t);
  const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF);
  __m512 p = _mm512_set1_ps(0.0135341605f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.0520114748f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.241442748f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.693003836f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.00000259f));
  return _mm512_scalef_ps(p, t);
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

// Calls f.template operator()<N>() for N = min(left, kMax), left >= 1: a product tile's panel
// count is a template parameter, so that its accumulators are registers.
template <int kMax, typename F>
void WithPanels(int64_t left, F&& f) {
  if constexpr (kMax > 1) {
    if (left < kMax) return WithPanels<kMax - 1>(left, f);
  }
  f.template operator()<kMax>();
}

// Lanes [j, j + 16) that lie in [lo, hi), as a mask.
inline __mmask16 LanesIn(int64_t j, int64_t lo, int64_t hi) {
  const int64_t a = std::clamp<int64_t>(lo - j, 0, 16), b = std::clamp<int64_t>(hi - j, 0, 16);
  return static_cast<__mmask16>(((1u << b) - 1u) & ~((1u << a) - 1u));
}

// Online softmax of one row's scores at [lo, hi) of the chunk (the others count as absent):
// updates the reference m and the sum l, writes the bf16 probabilities 2^(s - m) (zero outside
// [lo, hi), up to nk_pad) and, when m moves, rescales the row's output accumulators to it before
// this chunk's product is added. With lo = 0 the operations are those of a whole-row softmax,
// lane for lane (whole 16-score groups add unmasked, as a full mask does).
inline void SoftmaxRow(const float* s, int64_t lo, int64_t hi, int64_t nk_pad, float* m, float* l,
                       uint16_t* p, float* o, int64_t hd_pad) {
  const int64_t j0 = hi > lo ? lo / 16 * 16 : 0, j1 = hi > lo ? hi : 0;
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = j0; j < j1; j += 16) {
    const __mmask16 in = LanesIn(j, lo, hi);
    vmax = _mm512_mask_max_ps(vmax, in, _mm512_maskz_load_ps(in, s + j), vmax);
  }
  const float chunk_max = _mm512_reduce_max_ps(vmax);
  if (std::max(*m, chunk_max) == -INFINITY) {  // nothing but -inf and NaN so far
    std::fill(p, p + nk_pad, uint16_t{0});   // (vmaxps skips NaN)
    if (hi > lo && std::any_of(s + lo, s + hi, [](float v) { return std::isnan(v); })) *l = NAN;
    return;
  }
  // The reference m moves only when the chunk's max exceeds it by more than kSlack: terms up to
  // 2^kSlack are fine in bf16 and f32, and most chunks then skip the rescale of O and l.
  if (chunk_max > *m + kSlack) {
    const float alpha = std::exp2(*m - chunk_max);  // 0 on the first chunk (m = -inf)
    *l *= alpha;
    const __m512 va = _mm512_set1_ps(alpha);
    for (int64_t e = 0; e < hd_pad; e += 16) {
      _mm512_store_ps(o + e, _mm512_mul_ps(_mm512_load_ps(o + e), va));
    }
    *m = chunk_max;
  }
  const __m512 vm = _mm512_set1_ps(*m);
  __m512 vsum = _mm512_setzero_ps();
  std::fill(p, p + j0, uint16_t{0});
  for (int64_t j = j0; j < j1; j += 16) {
    const __mmask16 in = LanesIn(j, lo, hi);
    const __m512 e =
        Exp2NonPositive(_mm512_sub_ps(_mm512_maskz_load_ps(in, s + j), vm), kLowest);
    vsum = _mm512_mask_add_ps(vsum, in, vsum, e);
    const __m256i b = RoundToBf16(_mm512_maskz_mov_ps(in, e));
    std::memcpy(p + j, &b, sizeof(b));  // zeros outside [lo, hi)
  }
  std::fill(p + std::max(j0, (j1 + 15) / 16 * 16), p + nk_pad, uint16_t{0});
  // A NaN score makes the sum NaN; so does +inf (inf - inf), and both reach the output.
  *l += _mm512_reduce_add_ps(vsum);
}

// kScore and kAccumulate: the two products (functions, template arguments so that they inline).
template <auto kScore, auto kAccumulate>
void FlashAttention(const TileAttentionArgs& a) {
  alignas(64) float s[32 * kSStride];
  alignas(64) uint16_t p[32 * kPStride];
  const int64_t o_stride = a.hd_pad + 16;
  float* o = a.o_scratch;
  float m[32], l[32];
  const bool ranged = a.kv_first != nullptr && a.kv_end != nullptr;
  int64_t lo[32], hi[32];  // per row of a block: its keys [lo, hi)
  for (int64_t q0 = 0; q0 < a.n_q; q0 += 32) {
    const int64_t rows = std::min<int64_t>(32, a.n_q - q0);
    std::fill(o, o + 32 * o_stride, 0.0f);
    std::fill(m, m + 32, -INFINITY);
    std::fill(l, l + 32, 0.0f);
    int64_t k_begin = a.n_kv, k_end = 0;  // the keys some row of the block sees
    for (int64_t r = 0; r < 32; ++r) {
      lo[r] = hi[r] = 0;  // rows past n_q see nothing
      if (r >= rows) continue;
      if (ranged) {
        lo[r] = std::clamp<int64_t>(a.kv_first[q0 + r], 0, a.n_kv);
        hi[r] = std::clamp<int64_t>(a.kv_end[q0 + r], lo[r], a.n_kv);
      } else {
        hi[r] = a.n_kv;
      }
      if (hi[r] > lo[r]) {
        k_begin = std::min(k_begin, lo[r]);
        k_end = std::max(k_end, hi[r]);
      }
    }
    const uint16_t* q = a.q + q0 * a.ldq;
    for (int64_t k0 = k_begin / kChunk * kChunk; k0 < k_end; k0 += kChunk) {
      const int64_t nk = std::min(kChunk, k_end - k0);
      const int64_t steps = (nk + kTileK - 1) / kTileK;
      kScore(a, q, k0 / kTileCols, (nk + kTileCols - 1) / kTileCols, s);
      for (int64_t r = 0; r < 32; ++r) {
        SoftmaxRow(s + r * kSStride, std::clamp<int64_t>(lo[r] - k0, 0, nk),
                   std::clamp<int64_t>(hi[r] - k0, 0, nk), steps * kTileK, &m[r], &l[r],
                   p + r * kPStride, o + r * o_stride, a.hd_pad);
      }
      kAccumulate(a, p, k0, steps, o, o_stride);
    }
    const __mmask16 last = static_cast<__mmask16>(
        a.hd % 16 == 0 ? 0xFFFF : (1u << (a.hd % 16)) - 1u);
    for (int64_t r = 0; r < rows; ++r) {
      // l is 0 only when every score was -inf: zeros then (a NaN l stays NaN).
      const __m512 inv = _mm512_set1_ps(l[r] > 0.0f || std::isnan(l[r]) ? 1.0f / l[r] : 0.0f);
      uint16_t* out = a.out + (q0 + r) * a.ldo;
      for (int64_t e = 0; e < a.hd; e += 16) {
        const __mmask16 mask = e + 16 <= a.hd ? __mmask16{0xFFFF} : last;
        const __m256i b = RoundToBf16(_mm512_mul_ps(_mm512_load_ps(o + r * o_stride + e), inv));
        _mm256_mask_storeu_epi16(out + e, mask, b);
      }
    }
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels::flash
