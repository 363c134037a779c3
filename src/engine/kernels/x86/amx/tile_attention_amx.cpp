// Flash-style attention of one head on the AMX tile unit (tile_bf16.h, TileAttentionArgs).
//
// Queries go in blocks of 32 rows (two row tiles), keys in chunks of kChunk = 128. Per chunk:
//   1. S = Q K^T for the chunk (per 16-key panel: 2 accumulators), stored to a 32 x 128 f32
//      block in L1. With head_dim 64 the block's four Q tiles stay in tile registers.
//   2. Online softmax per row in base 2: a reference m (the running max, moved only when a
//      chunk exceeds it by more than 8), running sum l; the block's probabilities 2^(s - m)
//      rounded to bf16 into P (32 x 128, the A operand of the next product); the f32 output rows
//      O are rescaled by 2^(m_old - m_new) when m moves.
//   3. O += P V for the chunk: 2 row tiles x 2 output panels of accumulators, loaded from and
//      stored back to O (32 x head_dim f32 in L1).
// At the end O / l is written as bf16. Nothing of size n_q x n_kv exists: the score matrix of the
// unfused version went through L2 twice (store, then softmax), a tenth of the encoder's time.
// With a causal mask, a block stops at its last visible key and each row's softmax counts only
// its own visible keys (the rest of the chunk gets probability 0).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/amx/amx_common.h"

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined here: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vlmd::engine::kernels::amx {
namespace {

constexpr int64_t kChunk = 128;                   // keys per chunk: 8 panels
constexpr int64_t kSStride = kChunk + 16;         // f32 score rows: off the 4 KiB set stride
constexpr int64_t kPStride = kChunk + 32;         // bf16 probability rows
constexpr float kLowest = -150.0f;                // 2^-150: 0 (or a denormal) against the max
constexpr float kSlack = 8.0f;                    // probabilities up to 2^8 before a rescale

// S block = Q rows [q0, q0 + 32) x keys of panels [p0, p0 + panels), per panel two 16 x 16
// accumulators (rows 0-15, 16-31). hd_pad / 32 steps; the Q tiles stay resident when there are
// two steps (head_dim 64), else they are reloaded per panel.
void ScoreBlock(const TileAttentionArgs& a, const uint16_t* q, int64_t p0, int64_t panels,
                float* s) {
  const size_t q_stride = static_cast<size_t>(a.ldq) * sizeof(uint16_t);
  const size_t s_stride = kSStride * sizeof(float);
  const int64_t steps = a.hd_pad / kTileK;
  const uint16_t* q1 = q + 16 * a.ldq;
  if (steps == 2) {
    _tile_loadd(4, q, q_stride);
    _tile_loadd(5, q1, q_stride);
    _tile_loadd(6, q + kTileK, q_stride);
    _tile_loadd(7, q1 + kTileK, q_stride);
    for (int64_t p = 0; p < panels; ++p) {
      const uint16_t* b = a.k_tiles + (p0 + p) * a.hd_pad * kTileCols;
      _tile_zero(0);
      _tile_zero(1);
      _tile_loadd(2, b, 64);
      _tile_loadd(3, b + kTileK * kTileCols, 64);
      _tile_dpbf16ps(0, 4, 2);
      _tile_dpbf16ps(1, 5, 2);
      _tile_dpbf16ps(0, 6, 3);
      _tile_dpbf16ps(1, 7, 3);
      _tile_stored(0, s + p * kTileCols, s_stride);
      _tile_stored(1, s + 16 * kSStride + p * kTileCols, s_stride);
    }
    return;
  }
  for (int64_t p = 0; p < panels; ++p) {
    const uint16_t* b = a.k_tiles + (p0 + p) * a.hd_pad * kTileCols;
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t c = 0; c < steps; ++c) {
      _tile_loadd(4, q + c * kTileK, q_stride);
      _tile_loadd(5, q1 + c * kTileK, q_stride);
      _tile_loadd(2, b + c * kTileK * kTileCols, 64);
      _tile_dpbf16ps(0, 4, 2);
      _tile_dpbf16ps(1, 5, 2);
    }
    _tile_stored(0, s + p * kTileCols, s_stride);
    _tile_stored(1, s + 16 * kSStride + p * kTileCols, s_stride);
  }
}

// Online softmax of one row's nk scores (nk <= kChunk): updates the reference m and the sum l,
// writes the bf16 probabilities 2^(s - m) (zero up to nk_pad) and, when m moves, rescales the
// row's output accumulators to it before this chunk's product is added.
void SoftmaxRow(const float* s, int64_t nk, int64_t nk_pad, float* m, float* l, uint16_t* p,
                float* o, int64_t hd_pad) {
  const int64_t full = nk / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (nk - full)) - 1u);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < full; j += 16) vmax = _mm512_max_ps(_mm512_load_ps(s + j), vmax);
  if (tail) vmax = _mm512_mask_max_ps(vmax, tail, _mm512_maskz_load_ps(tail, s + full), vmax);
  const float chunk_max = _mm512_reduce_max_ps(vmax);
  if (std::max(*m, chunk_max) == -INFINITY) {  // nothing but -inf and NaN so far
    std::fill(p, p + nk_pad, uint16_t{0});   // (vmaxps skips NaN)
    if (std::any_of(s, s + nk, [](float v) { return std::isnan(v); })) *l = NAN;
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
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 e = Exp2NonPositive(_mm512_sub_ps(_mm512_load_ps(s + j), vm), kLowest);
    vsum = _mm512_add_ps(vsum, e);
    const __m256bh b = _mm512_cvtneps_pbh(e);
    std::memcpy(p + j, &b, sizeof(b));
  }
  if (tail) {
    const __m512 e =
        Exp2NonPositive(_mm512_sub_ps(_mm512_maskz_load_ps(tail, s + full), vm), kLowest);
    vsum = _mm512_mask_add_ps(vsum, tail, vsum, e);
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_mov_ps(tail, e));
    std::memcpy(p + full, &b, sizeof(b));  // zeros past nk
  }
  std::fill(p + (tail ? full + 16 : full), p + nk_pad, uint16_t{0});
  // A NaN score makes the sum NaN; so does +inf (inf - inf), and both reach the output.
  *l += _mm512_reduce_add_ps(vsum);
}

// O rows [0, 32) += P (32 x 32 * steps) V^T's panels for keys [k0, k0 + 32 * steps).
void AccumulateBlock(const TileAttentionArgs& a, const uint16_t* p, int64_t k0, int64_t steps,
                     float* o, int64_t o_stride) {
  const size_t p_stride = kPStride * sizeof(uint16_t);
  const size_t os = static_cast<size_t>(o_stride) * sizeof(float);
  const int64_t out_panels = (a.hd + kTileCols - 1) / kTileCols;
  const uint16_t* p1 = p + 16 * kPStride;
  for (int64_t e = 0; e < out_panels; e += 2) {
    const bool two = e + 1 < out_panels;
    const uint16_t* v0 = a.v_tiles + e * a.v_k * kTileCols + (k0 / kTileK) * kTileK * kTileCols;
    const uint16_t* v1 = v0 + a.v_k * kTileCols;
    float* o0 = o + e * kTileCols;
    float* o1 = o0 + kTileCols;
    _tile_loadd(0, o0, os);
    _tile_loadd(2, o0 + 16 * o_stride, os);
    if (two) {
      _tile_loadd(1, o1, os);
      _tile_loadd(3, o1 + 16 * o_stride, os);
    }
    for (int64_t c = 0; c < steps; ++c) {
      _tile_loadd(4, p + c * kTileK, p_stride);
      _tile_loadd(5, p1 + c * kTileK, p_stride);
      _tile_loadd(6, v0 + c * kTileK * kTileCols, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(2, 5, 6);
      if (two) {
        _tile_loadd(7, v1 + c * kTileK * kTileCols, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, o0, os);
    _tile_stored(2, o0 + 16 * o_stride, os);
    if (two) {
      _tile_stored(1, o1, os);
      _tile_stored(3, o1 + 16 * o_stride, os);
    }
  }
}

}  // namespace

void TileAttentionAmx(const TileAttentionArgs& a) {
  ConfigureTiles();
  alignas(64) float s[32 * kSStride];
  alignas(64) uint16_t p[32 * kPStride];
  const int64_t o_stride = a.hd_pad + 16;
  float* o = a.o_scratch;
  float m[32], l[32];
  // (Software-pipelining the product with chunk c after chunk c + 1's softmax, with two P
  // blocks, measured slower: 141-147 against 138-140 ms per SigLIP-B tile.)
  const bool causal = a.q_pos != nullptr && a.kv_pos != nullptr;
  int64_t visible[32];  // per row of a block: keys [0, visible) are not masked
  for (int64_t q0 = 0; q0 < a.n_q; q0 += 32) {
    const int64_t rows = std::min<int64_t>(32, a.n_q - q0);
    std::fill(o, o + 32 * o_stride, 0.0f);
    std::fill(m, m + 32, -INFINITY);
    std::fill(l, l + 32, 0.0f);
    int64_t n_kv = a.n_kv;
    std::fill(visible, visible + 32, a.n_kv);
    if (causal) {
      n_kv = 0;
      for (int64_t r = 0; r < 32; ++r) {
        visible[r] = r < rows ? std::upper_bound(a.kv_pos, a.kv_pos + a.n_kv, a.q_pos[q0 + r]) -
                                    a.kv_pos
                              : 0;
        n_kv = std::max(n_kv, visible[r]);
      }
    }
    const uint16_t* q = a.q + q0 * a.ldq;
    for (int64_t k0 = 0; k0 < n_kv; k0 += kChunk) {
      const int64_t nk = std::min(kChunk, n_kv - k0);
      const int64_t steps = (nk + kTileK - 1) / kTileK;
      ScoreBlock(a, q, k0 / kTileCols, (nk + kTileCols - 1) / kTileCols, s);
      for (int64_t r = 0; r < 32; ++r) {
        // Masked keys (past the row's visible ones) count as absent: probability 0.
        const int64_t nk_row = std::clamp<int64_t>(visible[r] - k0, 0, nk);
        SoftmaxRow(s + r * kSStride, nk_row, steps * kTileK, &m[r], &l[r], p + r * kPStride,
                   o + r * o_stride, a.hd_pad);
      }
      AccumulateBlock(a, p, k0, steps, o, o_stride);
    }
    const __mmask16 last = static_cast<__mmask16>(
        a.hd % 16 == 0 ? 0xFFFF : (1u << (a.hd % 16)) - 1u);
    for (int64_t r = 0; r < rows; ++r) {
      // l is 0 only when every score was -inf: zeros then (a NaN l stays NaN).
      const __m512 inv = _mm512_set1_ps(l[r] > 0.0f || std::isnan(l[r]) ? 1.0f / l[r] : 0.0f);
      uint16_t* out = a.out + (q0 + r) * a.ldo;
      for (int64_t e = 0; e < a.hd; e += 16) {
        const __mmask16 mask = e + 16 <= a.hd ? __mmask16{0xFFFF} : last;
        const __m256bh b =
            _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_load_ps(o + r * o_stride + e), inv));
        _mm256_mask_storeu_epi16(out + e, mask, reinterpret_cast<const __m256i&>(b));
      }
    }
  }
  _tile_release();
}

}  // namespace vlmd::engine::kernels::amx
