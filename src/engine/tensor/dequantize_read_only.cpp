// Dequantizers of the GGUF formats vlmd reads but never writes: Q5_1, IQ4_NL (32-value blocks)
// and Q2_K, Q3_K, IQ4_XS (256-value super-blocks), which llama.cpp's Q2_K, Q3_K_*, IQ4_XS and
// IQ4_NL files hold. Each value is computed as ggml's dequantize_row_* computes it (the same
// products in the same order, so the same floats): layouts in quant_blocks.h.
#include <cstring>

#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"

#if defined(__clang__)
#pragma clang fp contract(off)  // see quantize_legacy.cpp
#endif

namespace vlmd::engine::quant {

void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK4_0; ++i, y += kQK4_0) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int lo = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + kQK4_0 / 2] = static_cast<float>(hi) * d + m;
    }
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

void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const uint8_t sc = x[i].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      *y++ = dl * static_cast<float>((x[i].qs[32 * h + l] >> (2 * j)) & 3) - ml;
    }
  }
}

void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * static_cast<float>(Q3KScale(x[i], e / 16));
      *y++ = dl * static_cast<float>(Q3KLevel(x[i], e));
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
