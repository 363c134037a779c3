// The flash-style attention of one head (tile_bf16.h, TileAttentionArgs) shared by the AMX tile
// kernel, the AVX512-BF16 one, the AVX-512 FMA one, the AVX2 FMA one and the aarch64 NEON one:
// the driver (query blocks of 32 rows, keys in chunks of kChunk), the online softmax and the
// final normalization.
// The two products are the caller's:
//   score(a, q0, p0, panels, s): S = Q K^T for the 32 query rows from q0 x the 16-key panels
//     [p0, p0 + panels), into the f32 block s (32 rows of kSStride);
//   accumulate(a, p, k0, steps, o, o_stride): O rows [0, 32) += P (32 rows of kPStride bf16
//     probabilities, 32 * steps keys) x V^T's panels for keys [k0, k0 + 32 * steps).
// and so are the vector steps over one row (Rows: x86/flash_rows_avx512_inl.h,
// x86/flash_rows_avx2_inl.h, arm64/flash_rows_neon_inl.h):
//   Rows::Max(s, lo, hi): the largest score of s[lo, hi) (-inf when empty; NaN skipped);
//   Rows::Scale(o, n, alpha): o[0, n) *= alpha (n a multiple of 32);
//   Rows::Exp<kCheck>(s, lo, hi, nk_pad, m, limit, p, &sum): p[j] = bf16(2^(s[j] - m)) for j in
//     [lo, hi), 0 for the other j < nk_pad, sum = the f32 sum of the unrounded terms; returns
//     true. With kCheck, false instead when a score of [lo, hi) exceeds limit (NaN does not; p
//     and sum are then unspecified);
//   Rows::Store(o, inv, n, out): out[0, n) = bf16(o[j] * inv).
// s and o are 64-byte aligned and may be read in whole vectors past hi and n (s: up to the
// chunk's last 16-key panel, o: up to hd_pad).
// Per chunk: 1. S for the chunk, in L1. 2. Online softmax per row in base 2: a reference m (the
// running max, moved only when a chunk exceeds it by more than kSlack), running sum l; the
// block's probabilities 2^(s - m) rounded to bf16 into P; the f32 output rows O rescaled by
// 2^(m_old - m_new) when m moves. 3. O += P V. At the end O / l is written as bf16. Nothing of
// size n_q x n_kv exists. With key ranges (causal mask, sliding window), a block starts at the
// chunk of its first visible key and stops at its last one, and each row's softmax counts only
// its own keys (the rest of the chunk gets probability 0; a chunk with none leaves it as it was).
//
// Include only through a Rows header, from translation units compiled for its ISA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels::flash {
// Internal linkage: the including translation units are compiled with different ISA flags, and
// one linker-chosen copy of an inline function must not run where its ISA is missing.
namespace {

inline constexpr int64_t kChunk = kTileAttentionChunk;  // keys per chunk: 8 panels
inline constexpr int64_t kSStride = kChunk + 16;  // f32 score rows: off the 4 KiB set stride
inline constexpr int64_t kPStride = kChunk + 32;  // bf16 probability rows
inline constexpr float kSlack = 8.0f;             // probabilities up to 2^8 before a rescale

// Calls f.template operator()<N>() for N = min(left, kMax), left >= 1: a product tile's panel
// count is a template parameter, so that its accumulators are registers.
template <int kMax, typename F>
void WithPanels(int64_t left, F&& f) {
  if constexpr (kMax > 1) {
    if (left < kMax) return WithPanels<kMax - 1>(left, f);
  }
  f.template operator()<kMax>();
}

// Online softmax of one row's scores at [lo, hi) of the chunk (the others count as absent):
// updates the reference m and the sum l, writes the bf16 probabilities 2^(s - m) (zero outside
// [lo, hi), up to nk_pad) and, when m moves, rescales the row's output accumulators to it before
// this chunk's product is added.
template <typename Rows>
void SoftmaxRow(const float* s, int64_t lo, int64_t hi, int64_t nk_pad, float* m, float* l,
                uint16_t* p, float* o, int64_t hd_pad) {
  // Once the row has a reference, most chunks stay within kSlack of it: one pass then computes
  // the terms and checks that (the same terms and sum as Max, then Exp, would give); a chunk
  // that exceeds it takes the two passes below. This halved the softmax's time (1024 x 1024,
  // head dim 64, AVX512-BF16 on Zen 5).
  if (*m != -INFINITY) {
    float sum;
    if (Rows::template Exp<true>(s, lo, hi, nk_pad, *m, *m + kSlack, p, &sum)) {
      *l += sum;
      return;
    }
  }
  const float chunk_max = Rows::Max(s, lo, hi);
  if (std::max(*m, chunk_max) == -INFINITY) {  // nothing but -inf and NaN so far
    std::fill(p, p + nk_pad, uint16_t{0});   // (the max skips NaN)
    if (hi > lo && std::any_of(s + lo, s + hi, [](float v) { return std::isnan(v); })) *l = NAN;
    return;
  }
  // The reference m moves only when the chunk's max exceeds it by more than kSlack: terms up to
  // 2^kSlack are fine in bf16 and f32, and most chunks then skip the rescale of O and l.
  if (chunk_max > *m + kSlack) {
    const float alpha = std::exp2(*m - chunk_max);  // 0 on the first chunk (m = -inf)
    *l *= alpha;
    Rows::Scale(o, hd_pad, alpha);
    *m = chunk_max;
  }
  // A NaN score makes the sum NaN; so does +inf (inf - inf), and both reach the output.
  float sum;
  Rows::template Exp<false>(s, lo, hi, nk_pad, *m, 0.0f, p, &sum);
  *l += sum;
}

// kScore and kAccumulate: the two products (functions, template arguments so that they inline).
template <auto kScore, auto kAccumulate, typename Rows>
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
    for (int64_t k0 = k_begin / kChunk * kChunk; k0 < k_end; k0 += kChunk) {
      const int64_t nk = std::min(kChunk, k_end - k0);
      const int64_t steps = (nk + kTileK - 1) / kTileK;
      kScore(a, q0, k0 / kTileCols, (nk + kTileCols - 1) / kTileCols, s);
      for (int64_t r = 0; r < 32; ++r) {
        SoftmaxRow<Rows>(s + r * kSStride, std::clamp<int64_t>(lo[r] - k0, 0, nk),
                         std::clamp<int64_t>(hi[r] - k0, 0, nk), steps * kTileK, &m[r], &l[r],
                         p + r * kPStride, o + r * o_stride, a.hd_pad);
      }
      kAccumulate(a, p, k0, steps, o, o_stride);
    }
    for (int64_t r = 0; r < rows; ++r) {
      // l is 0 only when every score was -inf: zeros then (a NaN l stays NaN).
      const float inv = l[r] > 0.0f || std::isnan(l[r]) ? 1.0f / l[r] : 0.0f;
      Rows::Store(o + r * o_stride, inv, a.hd, a.out + (q0 + r) * a.ldo);
    }
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels::flash
