// Quantizers and dequantizers of the 32-element block formats: Q4_0, Q4_1, Q5_0, Q8_0, Q8_1.
// The weight quantizers reproduce ggml's quantize_row_*_ref bit for bit (see quantize.h for the
// pinned source); the float expressions below are written in the same order as ggml's because
// every rounding step shows in the bytes.
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"
#include "engine/tensor/quant_fit.h"

// Fused multiply-add would change the rounding of the expressions below (GCC in ISO mode never
// contracts; clang would on an FMA target).
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace vlmd::engine::quant {
namespace {

constexpr int kQK = 32;  // elements per block of every format in this file

// Symmetric 4/5-bit formats pick the element of largest magnitude (the first one on ties) and map
// it to the most negative level -2^(bits-1), keeping its sign in d; q = trunc(x / d + offset + 0.5)
// clipped to the top level. Returns d; writes the unsigned levels to q.
float QuantizeSymmetricBlock(const float* x, int n_levels, uint8_t* q) {
  const float max = quant::SignedAbsMax(x, kQK);
  const float half_levels = static_cast<float>(n_levels / 2);
  const float d = max / -half_levels;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float offset = half_levels + 0.5f;  // 8.5 for Q4_0, 16.5 for Q5_0
  for (int j = 0; j < kQK; ++j) {
    // The sum is >= 0.5 up to rounding, so truncation is floor; ggml truncates via int8_t.
    const int level = static_cast<int>(x[j] * id + offset);
    q[j] = static_cast<uint8_t>(level < n_levels - 1 ? level : n_levels - 1);
  }
  return d;
}

// Q8_0 scale search shared by the file and activation flavours: amax, ggml's MAX() order.
float BlockAbsMax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  return amax;
}

// round-half-even of a value already within int8 range after scaling; saturates like the
// packs instructions of the x86 path, NaN included (cvtps2dq's 0x80000000 packs to -128).
inline int8_t RoundEvenSaturate(float v) {
  float r = std::nearbyint(v);  // default rounding mode: to nearest, ties to even
  r = r >= -128.0f ? (r > 127.0f ? 127.0f : r) : -128.0f;  // NaN fails >=: -128
  return static_cast<int8_t>(r);
}

}  // namespace

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t k) {
  uint8_t q[kQK];
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    y[i].d = F32ToF16(QuantizeSymmetricBlock(x, 16, q));
    for (int j = 0; j < kQK / 2; ++j) {
      y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + kQK / 2] << 4));
    }
  }
}

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t k, const float* importance) {
  if (importance == nullptr) {
    QuantizeRowQ4_0(x, y, k);
    return;
  }
  // ggml's quantize_row_q4_0_impl: weights importance * sqrt(sigma2 + x^2), sigma2 the row's
  // mean x^2, and the weighted symmetric fit over 16 levels.
  float sum_x2 = 0;
  for (int64_t j = 0; j < k; ++j) sum_x2 += x[j] * x[j];
  const float sigma2 = sum_x2 / static_cast<float>(k);
  float weight[kQK];
  int8_t L[kQK];
  for (int64_t ib = 0; ib < k / kQK; ++ib) {
    const float* xb = x + kQK * ib;
    const float* qw = importance + kQK * ib;
    for (int j = 0; j < kQK; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    y[ib].d = F32ToF16(FitSymmetricLevels(xb, kQK, 8, L, weight));
    for (int j = 0; j < kQK / 2; ++j) {
      y[ib].qs[j] = static_cast<uint8_t>(L[j] | (L[j + kQK / 2] << 4));
    }
  }
}

void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t k) {
  uint8_t q[kQK];
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    y[i].d = F32ToF16(QuantizeSymmetricBlock(x, 32, q));
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = q[j], hi = q[j + kQK / 2];
      y[i].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));  // little-endian u32, as ggml stores it
  }
}

void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    // Affine: the range [min, max] is split into 15 steps; m = min, levels 0..15.
    float min = std::numeric_limits<float>::max();
    float max = -std::numeric_limits<float>::max();
    for (int j = 0; j < kQK; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].m = F32ToF16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int>((x[j] - min) * id + 0.5f);
      int q1 = static_cast<int>((x[j + kQK / 2] - min) * id + 0.5f);
      q0 = q0 < 15 ? q0 : 15;
      q1 = q1 < 15 ? q1 : 15;
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    const float d = BlockAbsMax(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    // Into a local block first: stores through int8_t (a char type) may alias x, which kept
    // the loop scalar.
    int8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<int8_t>(RoundHalfAway(x[j] * id));
    std::memcpy(y[i].qs, q, kQK);
  }
}

void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    const float d = BlockAbsMax(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    int8_t q[kQK];  // a local block, as in QuantizeRowQ8_0
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      q[j] = static_cast<int8_t>(RoundHalfAway(x[j] * id));
      sum += q[j];
    }
    std::memcpy(y[i].qs, q, kQK);
    y[i].s = F32ToF16(static_cast<float>(sum) * d);
  }
}

void QuantizeRowQ8_0Act(const float* x, BlockQ8_0* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    const float amax = BlockAbsMax(x);
    y[i].d = F32ToF16(amax / 127.0f);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = RoundEvenSaturate(x[j] * id);
  }
}

void QuantizeRowQ8_1Act(const float* x, BlockQ8_1* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
    const float amax = BlockAbsMax(x);
    const float d = amax / 127.0f;
    y[i].d = F32ToF16(d);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = RoundEvenSaturate(x[j] * id);
      sum += y[i].qs[j];
    }
    y[i].s = F32ToF16(d * static_cast<float>(sum));
  }
}

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    const float m = F16ToF32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
      y[j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + kQK / 2)) & 1u) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + kQK / 2] = static_cast<float>(hi - 16) * d;
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void DequantizeRowQ8_1(const BlockQ8_1* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

}  // namespace vlmd::engine::quant
