// The AVX-512 FMA products of the bf16 flash attention (flash_attention_inl.h: kScore,
// kAccumulate), for CPUs without AVX512-BF16 (Skylake-SP, Cascade Lake, Ice Lake): the same
// bf16 operands as the AMX and vdpbf16ps kernels, so the results differ from theirs only in the
// order of the f32 sums. A K panel's row w holds 16 keys x the pair (2w, 2w + 1) of head dims (a
// V^T panel's row: 16 head dims x a pair of keys) as 32-bit words: a shift and a mask make the
// even and the odd halves 16 f32 values each, which two FMAs multiply by one query's (or
// probability row's) pair, broadcast from an f32 copy of its row. Tiles of 8 rows x 2 panels: 16
// accumulators and 4 panel halves in flight (one panel row widened serves 8 rows; 4 x 4 tiles ran
// as fast at head size 64, ~10% slower at 128).
// Used by avx512/tile_attention_avx512.cpp (both products) and
// avx512vnni/tile_attention_vnni.cpp (P V next to the int8 scores).
//
// Include only from translation units compiled with AVX-512, after flash_rows_avx512_inl.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/flash_rows_avx512_inl.h"

namespace vlmd::engine::kernels::pair_fma_avx512 {
namespace {  // internal linkage: see flash_attention_inl.h

using flash::kPStride;
using flash::kSStride;
constexpr int kRows = 8;  // query rows per register tile

// bf16 values to f32: the bits moved into the high half (exact).
void WidenRows(const uint16_t* a, int64_t lda, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * lda + i));
      _mm512_store_ps(out + r * n + i,
                      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
  }
}

// C rows [0, kRows) x panels [0, N) (+)= the sum over `pairs` steps w of A's row pair w (f32
// rows of `lda`, broadcast) times row w of B's panel j (bf16 pairs, panel j at
// b + j * b_panel_stride, its row w at + 32 w). C: f32 rows ldc apart, panel j at + 16 j.
template <int N, bool kAccumulate>
void PairFmaTile(const float* a, int64_t lda, const uint16_t* b, int64_t b_panel_stride,
                 int64_t pairs, float* c, int64_t ldc) {
  __m512 acc[kRows][N];
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < N; ++j) {
      acc[i][j] = kAccumulate ? _mm512_load_ps(c + i * ldc + j * kTileCols) : _mm512_setzero_ps();
    }
  }
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  for (int64_t w = 0; w < pairs; ++w) {
    __m512 even[N], odd[N];
    for (int j = 0; j < N; ++j) {
      const __m512i v = _mm512_loadu_si512(b + j * b_panel_stride + w * 2 * kTileCols);
      even[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      odd[j] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
    for (int i = 0; i < kRows; ++i) {
      const __m512 ae = _mm512_set1_ps(a[i * lda + 2 * w]);
      const __m512 ao = _mm512_set1_ps(a[i * lda + 2 * w + 1]);
      for (int j = 0; j < N; ++j) {
        acc[i][j] = _mm512_fmadd_ps(ao, odd[j], _mm512_fmadd_ps(ae, even[j], acc[i][j]));
      }
    }
  }
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < N; ++j) _mm512_store_ps(c + i * ldc + j * kTileCols, acc[i][j]);
  }
}

// S = Q K^T for the 32 query rows x the 16-key panels [first, first + panels) (the driver's
// kScore). Each group of kRows query rows is widened to f32 once per call.
[[maybe_unused]] void Score(const TileAttentionArgs& a, int64_t q0, int64_t first, int64_t panels,
                            float* s) {
  const uint16_t* q = a.q + q0 * a.ldq;
  alignas(64) float qf[kRows * 512];  // hd_pad <= 512 (ops/attention.cpp kMaxTileHeadDim)
  const int64_t k_panel = a.hd_pad * kTileCols;
  for (int64_t r0 = 0; r0 < 32; r0 += kRows) {
    WidenRows(q + r0 * a.ldq, a.ldq, kRows, a.hd_pad, qf);
    for (int64_t p0 = 0; p0 < panels; p0 += 2) {
      flash::WithPanels<2>(panels - p0, [&]<int N>() {
        PairFmaTile<N, false>(qf, a.hd_pad, a.k_tiles + (first + p0) * k_panel, k_panel,
                              a.hd_pad / 2, s + r0 * kSStride + p0 * kTileCols, kSStride);
      });
    }
  }
}

// O rows [0, 32) += P V for keys [k0, k0 + 32 steps) (the driver's kAccumulate).
void Accumulate(const TileAttentionArgs& a, const uint16_t* p, int64_t k0, int64_t steps,
                float* o, int64_t o_stride) {
  alignas(64) float pf[kRows * kPStride];
  const int64_t keys = steps * kTileK;
  const int64_t out_panels = (a.hd + kTileCols - 1) / kTileCols;
  const int64_t v_panel = a.v_k * kTileCols;
  for (int64_t r0 = 0; r0 < 32; r0 += kRows) {
    WidenRows(p + r0 * kPStride, kPStride, kRows, keys, pf);
    for (int64_t e0 = 0; e0 < out_panels; e0 += 2) {
      flash::WithPanels<2>(out_panels - e0, [&]<int N>() {
        PairFmaTile<N, true>(pf, keys, a.v_tiles + e0 * v_panel + k0 * kTileCols, v_panel,
                             keys / 2, o + r0 * o_stride + e0 * kTileCols, o_stride);
      });
    }
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels::pair_fma_avx512
