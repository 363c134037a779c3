// Helpers shared by the AMX kernels (compiled with the amx ISA flags only): the tile
// configuration every kernel uses.
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
  // GCC 12 does not model _tile_loadconfig as reading the 64 bytes it loads: compiled on its
  // own (a function that only configures), it kept the palette byte and dropped the stores of
  // colsb/rows, and the first tile load then raised SIGILL. The empty asm that reads cfg keeps
  // them whatever the inlining context.
  asm volatile("" : : "m"(cfg));
  _tile_loadconfig(&cfg);
}

}  // namespace vlmd::engine::kernels::amx
