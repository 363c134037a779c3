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
#include "engine/kernels/x86/flash_attention_inl.h"
#include "engine/kernels/x86/x86_fill.h"

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined here: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

// S rows [r0, r0 + 4) x panels [p0, p0 + NP) of the chunk (absolute panel pa0 = first + p0).
template <int NP>
void ScoreTile(const TileAttentionArgs& a, const uint16_t* q, int64_t r0, int64_t pa0,
               int64_t p0, float* s) {
  __m512 acc[kRows][NP];
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint16_t* k[NP];
  for (int j = 0; j < NP; ++j) k[j] = a.k_tiles + (pa0 + j) * a.hd_pad * kTileCols;
  const uint16_t* qr[kRows];
  for (int i = 0; i < kRows; ++i) qr[i] = q + (r0 + i) * a.ldq;
  for (int64_t w = 0; w < a.hd_pad / 2; ++w) {
    __m512bh kv[NP];
    for (int j = 0; j < NP; ++j) kv[j] = LoadPairs(k[j] + w * 2 * kTileCols);
    for (int i = 0; i < kRows; ++i) {
      const __m512bh qb = BroadcastPair(qr[i] + 2 * w);
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], qb, kv[j]);
    }
  }
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < NP; ++j) {
      _mm512_store_ps(s + (r0 + i) * kSStride + (p0 + j) * kTileCols, acc[i][j]);
    }
  }
}

// O rows [r0, r0 + 4) x output panels [e0, e0 + NE) += P x V^T for keys [k0, k0 + 32 steps).
template <int NE>
void AccumulateTile(const TileAttentionArgs& a, const uint16_t* p, int64_t r0, int64_t e0,
                    int64_t k0, int64_t steps, float* o, int64_t o_stride) {
  __m512 acc[kRows][NE];
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < NE; ++j) {
      acc[i][j] = _mm512_load_ps(o + (r0 + i) * o_stride + (e0 + j) * kTileCols);
    }
  }
  const uint16_t* v[NE];
  for (int j = 0; j < NE; ++j) v[j] = a.v_tiles + (e0 + j) * a.v_k * kTileCols + k0 * kTileCols;
  const uint16_t* pr[kRows];
  for (int i = 0; i < kRows; ++i) pr[i] = p + (r0 + i) * kPStride;
  for (int64_t w = 0; w < steps * kTileK / 2; ++w) {
    __m512bh vv[NE];
    for (int j = 0; j < NE; ++j) vv[j] = LoadPairs(v[j] + w * 2 * kTileCols);
    for (int i = 0; i < kRows; ++i) {
      const __m512bh pb = BroadcastPair(pr[i] + 2 * w);
      for (int j = 0; j < NE; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], pb, vv[j]);
    }
  }
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < NE; ++j) {
      _mm512_store_ps(o + (r0 + i) * o_stride + (e0 + j) * kTileCols, acc[i][j]);
    }
  }
}

// Calls f.template operator()<N>() for N = min(left, 4) (a tile's panel count is a template
// parameter, so that its accumulators are registers).
template <typename F>
void WithPanels(int64_t left, F&& f) {
  switch (left >= 4 ? 4 : left) {
    case 4: f.template operator()<4>(); break;
    case 3: f.template operator()<3>(); break;
    case 2: f.template operator()<2>(); break;
    default: f.template operator()<1>(); break;
  }
}

struct Bf16Blocks {
  void Score(const TileAttentionArgs& a, const uint16_t* q, int64_t first_panel, int64_t panels,
             float* s) const {
    for (int64_t p0 = 0; p0 < panels; p0 += 4) {
      for (int64_t r0 = 0; r0 < 32; r0 += kRows) {
        WithPanels(panels - p0, [&]<int N>() { ScoreTile<N>(a, q, r0, first_panel + p0, p0, s); });
      }
    }
  }
  void Accumulate(const TileAttentionArgs& a, const uint16_t* p, int64_t k0, int64_t steps,
                  float* o, int64_t o_stride) const {
    const int64_t out_panels = (a.hd + kTileCols - 1) / kTileCols;
    for (int64_t e0 = 0; e0 < out_panels; e0 += 4) {
      for (int64_t r0 = 0; r0 < 32; r0 += kRows) {
        WithPanels(out_panels - e0,
                   [&]<int N>() { AccumulateTile<N>(a, p, r0, e0, k0, steps, o, o_stride); });
      }
    }
  }
};

void TileAttentionAvx512Bf16(const TileAttentionArgs& a) {
  Bf16Blocks blocks;
  flash::FlashAttention(a, blocks);
}

}  // namespace

void FillAvx512Bf16Attention(KernelTable* t) { t->tile_attention = TileAttentionAvx512Bf16; }

}  // namespace vlmd::engine::kernels
