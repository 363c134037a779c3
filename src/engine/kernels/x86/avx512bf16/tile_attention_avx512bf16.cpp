// Flash-style attention of one head with AVX512-BF16 (tile_bf16.h, TileAttentionArgs), for CPUs
// with AVX512-BF16 but no AMX (Zen 4/5, Cooper Lake): the driver and online softmax of
// flash_attention_inl.h, the two products on vdpbf16ps. The operands are the tile layouts the
// AMX kernel reads: a K panel's row w is 16 keys x the pair (2w, 2w + 1) of head dims, a V^T
// panel's row w is 16 head dims x the keys (2w, 2w + 1): one 512-bit register, which vdpbf16ps
// multiplies by one query's (or probability row's) pair broadcast, accumulating 16 f32 sums.
// Tiles of 4 rows x 4 panels: 16 accumulators, 4 panel rows and a broadcast in flight.
// The scores of the f32 path (two f32 GEMMs per head) on the same CPU ran at the f32 FMA rate;
// vdpbf16ps does two products per lane per instruction.
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/flash_rows_avx512_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace {

using flash::kPStride;
using flash::kSStride;
constexpr int kRows = 4;  // query rows per register tile

inline __m512bh BroadcastPair(const uint16_t* p) {
  int32_t w;
  std::memcpy(&w, p, sizeof(w));
  return (__m512bh)_mm512_set1_epi32(w);
}

// Unaligned: the panels are where the caller put them (the tile loads of AMX need no alignment).
inline __m512bh LoadPairs(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// Both products of the attention as one register tile: C rows [0, 4) x panels [0, N) (+)= the
// sum over `pairs` steps w of A's row pair w (broadcast) times row w of B's panel j.
//   A: bf16 rows lda apart (Q for the scores, P for the output), pair w at 2w;
//   B: panel j at b + j * b_panel_stride, its row w (16 columns x a pair) at + 32 w;
//   C: f32 rows ldc apart, panel j's 16 columns at + 16 j; loaded first when kAccumulate.
template <int N, bool kAccumulate>
void PairDotTile(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t b_panel_stride,
                 int64_t pairs, float* c, int64_t ldc) {
  __m512 acc[kRows][N];
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < N; ++j) {
      acc[i][j] = kAccumulate ? _mm512_load_ps(c + i * ldc + j * kTileCols) : _mm512_setzero_ps();
    }
  }
  for (int64_t w = 0; w < pairs; ++w) {
    __m512bh bv[N];
    for (int j = 0; j < N; ++j) bv[j] = LoadPairs(b + j * b_panel_stride + w * 2 * kTileCols);
    for (int i = 0; i < kRows; ++i) {
      const __m512bh ab = BroadcastPair(a + i * lda + 2 * w);
      for (int j = 0; j < N; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], ab, bv[j]);
    }
  }
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < N; ++j) _mm512_store_ps(c + i * ldc + j * kTileCols, acc[i][j]);
  }
}

// S = Q K^T for the 32 query rows x the 16-key panels [first, first + panels) (the driver's
// kScore).
void Score(const TileAttentionArgs& a, int64_t q0, int64_t first, int64_t panels, float* s) {
  const uint16_t* q = a.q + q0 * a.ldq;
  const int64_t k_panel = a.hd_pad * kTileCols;
  for (int64_t p0 = 0; p0 < panels; p0 += 4) {
    for (int64_t r0 = 0; r0 < 32; r0 += kRows) {
      flash::WithPanels<4>(panels - p0, [&]<int N>() {
        PairDotTile<N, false>(q + r0 * a.ldq, a.ldq, a.k_tiles + (first + p0) * k_panel, k_panel,
                              a.hd_pad / 2, s + r0 * kSStride + p0 * kTileCols, kSStride);
      });
    }
  }
}

// O rows [0, 32) += P V for keys [k0, k0 + 32 steps) (the driver's kAccumulate).
void Accumulate(const TileAttentionArgs& a, const uint16_t* p, int64_t k0, int64_t steps,
                float* o, int64_t o_stride) {
  const int64_t out_panels = (a.hd + kTileCols - 1) / kTileCols;
  const int64_t v_panel = a.v_k * kTileCols;
  for (int64_t e0 = 0; e0 < out_panels; e0 += 4) {
    for (int64_t r0 = 0; r0 < 32; r0 += kRows) {
      flash::WithPanels<4>(out_panels - e0, [&]<int N>() {
        PairDotTile<N, true>(p + r0 * kPStride, kPStride,
                             a.v_tiles + e0 * v_panel + k0 * kTileCols, v_panel,
                             steps * kTileK / 2, o + r0 * o_stride + e0 * kTileCols, o_stride);
      });
    }
  }
}

void TileAttentionAvx512Bf16(const TileAttentionArgs& a) {
  flash::FlashAttention<Score, Accumulate, flash::Avx512Rows>(a);
}

}  // namespace

void FillAvx512Bf16Attention(KernelTable* t) {
  t->tile_attention = TileAttentionAvx512Bf16;
  // No int8 scores (the avx512vnni table's): on Zen 5 vdpbf16ps ran this kernel's scores
  // nearly as fast as vpdpbusd (the whole kernel 1-10% faster with them, an InternViT encode
  // not measurably), not worth their larger rounding (bench/RESULTS.md, session 28).
  t->tile_attention_i8 = nullptr;
  t->quantize_queries_i8 = nullptr;
  t->pack_keys_i8 = nullptr;
}

}  // namespace vlmd::engine::kernels
