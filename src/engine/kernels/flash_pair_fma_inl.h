// The two products of the flash attention driver (flash_attention_inl.h: kScore, kAccumulate) for
// the kernels that multiply one panel at a time on f32 FMAs (AVX2, NEON): each group of kRows
// query (or probability) rows is widened from bf16 to f32 once per call, then multiplied into
// each 16-column panel by the ISA's pair-FMA tile. The ISA gives
//   Fma::Widen(a, lda, rows, n, out): rows of n bf16 values (n a multiple of 8) to f32 rows of
//     n, bit-exact;
//   Fma::Tile<R, kAccumulate>(a, lda, b, pairs, c, ldc): C rows [0, R) x one panel's 16 columns
//     (+)= the sum over `pairs` steps w of A's row pair w times the panel's row w (bf16 pairs);
// and its register tile height kRows (a 32-row block is kRows-row tiles, then one of the rest).
//
// Include only from an ISA's kernel file (compiled with its flags), as flash_attention_inl.h.
#pragma once

#include <cstdint>

#include "engine/kernels/flash_attention_inl.h"
#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels::flash {
namespace {  // internal linkage: see flash_attention_inl.h

template <typename Fma, int kRows>
struct PairFmaProducts {
  // Calls f.template operator()<R>(r0) for the row groups of a 32-row block: kRows rows each,
  // then the rest.
  template <typename F>
  static void ForRowGroups(F&& f) {
    int64_t r0 = 0;
    for (; r0 + kRows <= 32; r0 += kRows) f.template operator()<kRows>(r0);
    if constexpr (32 % kRows != 0) f.template operator()<32 % kRows>(r0);
  }

  // S = Q K^T for the 32 query rows x the 16-key panels [first, first + panels) (kScore).
  static void Score(const TileAttentionArgs& a, int64_t q0, int64_t first, int64_t panels,
                    float* s) {
    const uint16_t* q = a.q + q0 * a.ldq;
    alignas(64) float qf[kRows * 512];  // hd_pad <= 512 (ops/attention.cpp kMaxTileHeadDim)
    const int64_t k_panel = a.hd_pad * kTileCols;
    ForRowGroups([&]<int R>(int64_t r0) {
      Fma::Widen(q + r0 * a.ldq, a.ldq, R, a.hd_pad, qf);
      for (int64_t p = 0; p < panels; ++p) {
        Fma::template Tile<R, false>(qf, a.hd_pad, a.k_tiles + (first + p) * k_panel,
                                     a.hd_pad / 2, s + r0 * kSStride + p * kTileCols, kSStride);
      }
    });
  }

  // O rows [0, 32) += P V for keys [k0, k0 + 32 steps) (kAccumulate).
  static void Accumulate(const TileAttentionArgs& a, const uint16_t* p, int64_t k0, int64_t steps,
                         float* o, int64_t o_stride) {
    alignas(64) float pf[kRows * kPStride];
    const int64_t keys = steps * kTileK;
    const int64_t out_panels = (a.hd + kTileCols - 1) / kTileCols;
    const int64_t v_panel = a.v_k * kTileCols;
    ForRowGroups([&]<int R>(int64_t r0) {
      Fma::Widen(p + r0 * kPStride, kPStride, R, keys, pf);
      for (int64_t e = 0; e < out_panels; ++e) {
        Fma::template Tile<R, true>(pf, keys, a.v_tiles + e * v_panel + k0 * kTileCols, keys / 2,
                                    o + r0 * o_stride + e * kTileCols, o_stride);
      }
    });
  }
};

}  // namespace
}  // namespace vlmd::engine::kernels::flash
