// Flash-style attention of one head on the AMX tile unit (tile_bf16.h, TileAttentionArgs): the
// driver and online softmax of flash_attention_inl.h with the two products on tiles.
//   Score: per 16-key panel two 16 x 16 accumulators (query rows 0-15, 16-31), stored to the
//     32 x 128 f32 block in L1. With head_dim 64 the block's four Q tiles stay in tile registers.
//   Accumulate: 2 row tiles x 2 output panels of accumulators, loaded from and stored back to O
//     (32 x head_dim f32 in L1).
// (Software-pipelining the product with chunk c after chunk c + 1's softmax, with two P blocks,
// measured slower: 141-147 against 138-140 ms per SigLIP-B tile.)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/amx/amx_common.h"
#include "engine/kernels/x86/flash_rows_avx512_inl.h"

namespace vlmd::engine::kernels::amx {
namespace {

using flash::kPStride;
using flash::kSStride;

// S block = Q rows [q0, q0 + 32) x keys of panels [p0, p0 + panels), per panel two 16 x 16
// accumulators (rows 0-15, 16-31). hd_pad / 32 steps; the Q tiles stay resident when there are
// two steps (head_dim 64), else they are reloaded per panel.
void ScoreBlock(const TileAttentionArgs& a, int64_t q0, int64_t p0, int64_t panels, float* s) {
  const uint16_t* q = a.q + q0 * a.ldq;
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
  flash::FlashAttention<ScoreBlock, AccumulateBlock, flash::Avx512Rows>(a);
  _tile_release();
}

}  // namespace vlmd::engine::kernels::amx
