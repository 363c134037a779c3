// Dequantizers of the GGUF formats vlmd reads but never writes: Q5_1, IQ4_NL (32-value blocks)
// and Q2_K, Q3_K, IQ4_XS (256-value super-blocks), which llama.cpp's Q2_K, Q3_K_*, IQ4_XS and
// IQ4_NL files hold. Each value is computed as ggml's dequantize_row_* computes it (the same
// products in the same order, so the same floats): layouts in quant_blocks.h.

#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"

#if defined(__clang__)
#pragma clang fp contract(off)  // see quantize_legacy.cpp
#endif

namespace vlmd::engine::quant {

void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK4_0; ++i, y += kQK4_0) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    uint8_t level[kQK4_0];
    Q5Levels(x[i].qs, x[i].qh, level);
    for (int j = 0; j < kQK4_0; ++j) y[j] = static_cast<float>(level[j]) * d + m;
  }
}

void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK4_0; ++i, y += kQK4_0) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4NlValues[x[i].qs[j] & 0xF]);
      y[j + kQK4_0 / 2] = d * static_cast<float>(kIq4NlValues[x[i].qs[j] >> 4]);
    }
  }
}

// Element 128 h + 32 j + l is bits 2j of qs[32 h + l] (quant_blocks.h); sub-block s = e / 16.
void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half, y += 16) {
          const uint8_t sc = x[i].scales[8 * h + 2 * j + half];
          const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
          const uint8_t* q = x[i].qs + 32 * h + 16 * half;
          for (int l = 0; l < 16; ++l) y[l] = dl * static_cast<float>((q[l] >> (2 * j)) & 3) - ml;
        }
      }
    }
  }
}

void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t k) {
  int8_t level[kQK_K];
  for (int64_t i = 0; i < k / kQK_K; ++i, y += kQK_K) {
    const float d = F16ToF32(x[i].d);
    Q3KLevels(x[i], level);
    for (int s = 0; s < kQK_K / 16; ++s) {
      const float dl = d * static_cast<float>(Q3KScale(x[i], s));
      for (int l = 0; l < 16; ++l) y[16 * s + l] = dl * static_cast<float>(level[16 * s + l]);
    }
  }
}

void DequantizeRowIQ4_XS(const BlockIQ4_XS* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int s = 0; s < kQK_K / 32; ++s, y += 32) {
      const float dl = d * static_cast<float>(IQ4XSScale(x[i], s));
      const uint8_t* qs = x[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4NlValues[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIq4NlValues[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace vlmd::engine::quant
