// Helpers shared by the AMX kernels (compiled with the amx ISA flags only): the tile
// configuration every kernel uses and a 2^t for t <= 0 on AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace vlmd::engine::kernels {
struct TileAttentionArgs;
}

namespace vlmd::engine::kernels::amx {

// tile_attention_amx.cpp: the table's tile_attention.
void TileAttentionAmx(const TileAttentionArgs& args);

// The 64-byte tile configuration (palette 1): every tile used is 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline void ConfigureTiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

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

}  // namespace vlmd::engine::kernels::amx
