// Scalar reference dot products of one weight row with one activation row, per weight type and
// its activation format (the ggml vec_dot / vec_dot_type pairs). The SIMD kernels must agree
// with these: the integer block parts (Block*Dot*) exactly, the float results within rounding.
//
// Numerics follow ggml's generic kernels (ggml/src/ggml-cpu/quants.c, *_generic; pinned:
// https://github.com/ggml-org/llama.cpp/blob/3f545beccee69d9975f466ec7e45fd9aacd8ba90/ggml/src/ggml-cpu/quants.c):
// integer dot products inside each (sub-)block, then the block scales in f32, accumulated in
// f32 in the same association (the k-quants keep ggml's 8 f32 lanes, summed at the end). The
// plain-float dots accumulate f32 products in double, as ggml_vec_dot_{f32,f16,bf16} do.
//
// All functions: n is the row length (a multiple of the block size) and x, y hold n / block_size
// blocks each; no checks, no allocation, thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/tensor/fp16.h"
#include "engine/tensor/quant_blocks.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine::kernels::ref {

// ---- 32-element blocks: exact integer dot of the quant levels -------------------------------

// sum (q4 - 8) * q8 over the block.
inline int32_t BlockDotQ4_0Q8_0(const BlockQ4_0& x, const BlockQ8_0& y) {
  int32_t sum = 0;
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    sum += ((x.qs[j] & 0xF) - 8) * y.qs[j];
    sum += ((x.qs[j] >> 4) - 8) * y.qs[j + kQK4_0 / 2];
  }
  return sum;
}

// sum q4 * q8 with the unsigned levels q4 in [0, 15] (the offset m is applied via y.s).
inline int32_t BlockDotQ4_1Q8_1(const BlockQ4_1& x, const BlockQ8_1& y) {
  int32_t sum = 0;
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    sum += (x.qs[j] & 0xF) * y.qs[j];
    sum += (x.qs[j] >> 4) * y.qs[j + kQK4_0 / 2];
  }
  return sum;
}

// sum (q5 - 16) * q8.
inline int32_t BlockDotQ5_0Q8_0(const BlockQ5_0& x, const BlockQ8_0& y) {
  uint8_t level[kQK4_0];
  quant::Q5Levels(x.qs, x.qh, level);
  int32_t sum = 0;
  for (int j = 0; j < kQK4_0; ++j) sum += (level[j] - 16) * y.qs[j];
  return sum;
}

// sum q5 * q8 with the unsigned levels q5 in [0, 31] (the offset m is applied via y.s).
inline int32_t BlockDotQ5_1Q8_1(const BlockQ5_1& x, const BlockQ8_1& y) {
  uint8_t level[kQK4_0];
  quant::Q5Levels(x.qs, x.qh, level);
  int32_t sum = 0;
  for (int j = 0; j < kQK4_0; ++j) sum += level[j] * y.qs[j];
  return sum;
}

// sum kIq4NlValues[q] * q8.
inline int32_t BlockDotIQ4_NLQ8_0(const BlockIQ4_NL& x, const BlockQ8_0& y) {
  int32_t sum = 0;
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    sum += kIq4NlValues[x.qs[j] & 0xF] * y.qs[j];
    sum += kIq4NlValues[x.qs[j] >> 4] * y.qs[j + kQK4_0 / 2];
  }
  return sum;
}

inline int32_t BlockDotQ8_0Q8_0(const BlockQ8_0& x, const BlockQ8_0& y) {
  int32_t sum = 0;
  for (int j = 0; j < kQK8_0; ++j) sum += x.qs[j] * y.qs[j];
  return sum;
}

inline float VecDotQ4_0Q8_0(int64_t n, const BlockQ4_0* x, const BlockQ8_0* y) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    sum += static_cast<float>(BlockDotQ4_0Q8_0(x[i], y[i])) * F16ToF32(x[i].d) * F16ToF32(y[i].d);
  }
  return sum;
}

// Sum over 32-value blocks of (d_x d_y) * the block's integer dot, plus m_x s_y for the formats
// with a min (Q4_1, Q5_1: s_y = d_y sum(q8) was stored by the activation quantizer).
template <typename X, typename Y, int32_t (*BlockDot)(const X&, const Y&)>
inline float VecDotBlocks32(int64_t n, const X* x, const Y* y) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    float term = (F16ToF32(x[i].d) * F16ToF32(y[i].d)) * static_cast<float>(BlockDot(x[i], y[i]));
    if constexpr (requires(const X& b) { b.m; }) term += F16ToF32(x[i].m) * F16ToF32(y[i].s);
    sum += term;
  }
  return sum;
}

inline float VecDotQ4_1Q8_1(int64_t n, const BlockQ4_1* x, const BlockQ8_1* y) {
  return VecDotBlocks32<BlockQ4_1, BlockQ8_1, BlockDotQ4_1Q8_1>(n, x, y);
}
inline float VecDotQ5_0Q8_0(int64_t n, const BlockQ5_0* x, const BlockQ8_0* y) {
  return VecDotBlocks32<BlockQ5_0, BlockQ8_0, BlockDotQ5_0Q8_0>(n, x, y);
}
inline float VecDotQ5_1Q8_1(int64_t n, const BlockQ5_1* x, const BlockQ8_1* y) {
  return VecDotBlocks32<BlockQ5_1, BlockQ8_1, BlockDotQ5_1Q8_1>(n, x, y);
}
inline float VecDotIQ4_NLQ8_0(int64_t n, const BlockIQ4_NL* x, const BlockQ8_0* y) {
  return VecDotBlocks32<BlockIQ4_NL, BlockQ8_0, BlockDotIQ4_NLQ8_0>(n, x, y);
}
inline float VecDotQ8_0Q8_0(int64_t n, const BlockQ8_0* x, const BlockQ8_0* y) {
  return VecDotBlocks32<BlockQ8_0, BlockQ8_0, BlockDotQ8_0Q8_0>(n, x, y);
}

// ---- k-quants against Q8_K -------------------------------------------------------------------

// Integer parts of one super-block: lanes[l] = sum over the block's elements e with e % 8 == l of
// scale(sub-block of e) * q_x[e] * q_y[e] (the grouping ggml's generic kernel accumulates in),
// and min_dot = sum over 16-groups g of bsums[g] * min(sub-block of g) (Q4_K/Q5_K only).
// The block's value is  d_x d_y sum(lanes) - dmin_x d_y min_dot.
struct KBlockDot {
  int32_t lanes[8] = {};
  int32_t min_dot = 0;
  int32_t Total() const {
    int32_t t = 0;
    for (int32_t v : lanes) t += v;
    return t;
  }
};

// Shared by Q4_K and Q5_K: `levels` are the block's 256 unsigned levels in element order.
inline KBlockDot KBlockDotAffine(const uint8_t* scales, const uint8_t* levels, const BlockQ8_K& y) {
  KBlockDot r;
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) quant::UnpackScaleMinK4(j, scales, &sc[j], &mn[j]);
  for (int e = 0; e < kQK_K; ++e) r.lanes[e % 8] += sc[e / 32] * (levels[e] * y.qs[e]);
  for (int g = 0; g < kQK_K / 16; ++g) r.min_dot += y.bsums[g] * mn[g / 2];
  return r;
}

inline KBlockDot BlockDotQ4_KQ8_K(const BlockQ4_K& x, const BlockQ8_K& y) {
  uint8_t levels[kQK_K];
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      levels[64 * c + l] = x.qs[32 * c + l] & 0xF;
      levels[64 * c + 32 + l] = x.qs[32 * c + l] >> 4;
    }
  }
  return KBlockDotAffine(x.scales, levels, y);
}

inline KBlockDot BlockDotQ5_KQ8_K(const BlockQ5_K& x, const BlockQ8_K& y) {
  uint8_t levels[kQK_K];
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int h_lo = (x.qh[l] >> (2 * c)) & 1, h_hi = (x.qh[l] >> (2 * c + 1)) & 1;
      levels[64 * c + l] = static_cast<uint8_t>((x.qs[32 * c + l] & 0xF) | (h_lo << 4));
      levels[64 * c + 32 + l] = static_cast<uint8_t>((x.qs[32 * c + l] >> 4) | (h_hi << 4));
    }
  }
  return KBlockDotAffine(x.scales, levels, y);
}

// Q6_K: lanes hold sum scale_j * (q6 - 32) * q8 over 16 sub-blocks of 16; min_dot stays 0.
inline KBlockDot BlockDotQ6_KQ8_K(const BlockQ6_K& x, const BlockQ8_K& y) {
  KBlockDot r;
  for (int h = 0; h < kQK_K / 128; ++h) {
    const uint8_t* ql = x.ql + 64 * h;
    const uint8_t* qh = x.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const int q[4] = {((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32,
                        ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32,
                        ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
                        ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32};
      for (int part = 0; part < 4; ++part) {
        const int e = 128 * h + 32 * part + l;
        r.lanes[e % 8] += x.scales[e / 16] * (q[part] * y.qs[e]);
      }
    }
  }
  return r;
}

// Q3_K: lanes hold sum (s_j - 32) * level * q8 over 16 sub-blocks of 16; min_dot stays 0.
inline KBlockDot BlockDotQ3_KQ8_K(const BlockQ3_K& x, const BlockQ8_K& y) {
  KBlockDot r;
  int8_t level[kQK_K];
  quant::Q3KLevels(x, level);
  for (int s = 0; s < kQK_K / 16; ++s) {
    const int scale = quant::Q3KScale(x, s);
    for (int l = 0; l < 16; ++l) r.lanes[l % 8] += scale * (level[16 * s + l] * y.qs[16 * s + l]);
  }
  return r;
}

// sum over blocks, f32: lanes scaled by d into 8 running sums, mins subtracted from a separate
// running sum, the 8 lanes added last (ggml's generic association).
template <typename Block, KBlockDot (*BlockDot)(const Block&, const BlockQ8_K&), bool kHasMin>
inline float VecDotKQuant(int64_t n, const Block* x, const BlockQ8_K* y) {
  float lane_sums[8] = {};
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const KBlockDot b = BlockDot(x[i], y[i]);
    const float d = F16ToF32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) lane_sums[l] += d * static_cast<float>(b.lanes[l]);
    if constexpr (kHasMin) {
      const float dmin = F16ToF32(x[i].dmin) * y[i].d;
      sum -= dmin * static_cast<float>(b.min_dot);
    }
  }
  for (int l = 0; l < 8; ++l) sum += lane_sums[l];
  return sum;
}

inline float VecDotQ4_KQ8_K(int64_t n, const BlockQ4_K* x, const BlockQ8_K* y) {
  return VecDotKQuant<BlockQ4_K, BlockDotQ4_KQ8_K, true>(n, x, y);
}
inline float VecDotQ5_KQ8_K(int64_t n, const BlockQ5_K* x, const BlockQ8_K* y) {
  return VecDotKQuant<BlockQ5_K, BlockDotQ5_KQ8_K, true>(n, x, y);
}
inline float VecDotQ6_KQ8_K(int64_t n, const BlockQ6_K* x, const BlockQ8_K* y) {
  return VecDotKQuant<BlockQ6_K, BlockDotQ6_KQ8_K, false>(n, x, y);
}
inline float VecDotQ3_KQ8_K(int64_t n, const BlockQ3_K* x, const BlockQ8_K* y) {
  return VecDotKQuant<BlockQ3_K, BlockDotQ3_KQ8_K, false>(n, x, y);
}

// Q2_K: per super-block, the integer sum of scale_j * q2 * q8 over the 16 sub-blocks and the
// integer sum of min_j * bsums_j, scaled by d and dmin once each (ggml's generic association).
inline float VecDotQ2_KQ8_K(int64_t n, const BlockQ2_K* x, const BlockQ8_K* y) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t min_dot = 0;
    for (int j = 0; j < kQK_K / 16; ++j) min_dot += y[i].bsums[j] * (x[i].scales[j] >> 4);
    int32_t dot = 0;
    // Sub-block 8 h + 2 j + half holds elements 128 h + 32 j + 16 half + l, l < 16.
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t* q2 = x[i].qs + 32 * h + 16 * half;
          const int8_t* q8 = y[i].qs + 128 * h + 32 * j + 16 * half;
          int32_t sub = 0;
          for (int l = 0; l < 16; ++l) sub += q8[l] * ((q2[l] >> (2 * j)) & 3);
          dot += (x[i].scales[8 * h + 2 * j + half] & 0xF) * sub;
        }
      }
    }
    const float dall = y[i].d * F16ToF32(x[i].d), dmin = y[i].d * F16ToF32(x[i].dmin);
    sum += dall * static_cast<float>(dot) - dmin * static_cast<float>(min_dot);
  }
  return sum;
}

// IQ4_XS: each 32-value sub-block's integer dot scaled by d_x d_y (s_j - 32), summed in f32.
inline float VecDotIQ4_XSQ8_K(int64_t n, const BlockIQ4_XS* x, const BlockQ8_K* y) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d) * y[i].d;
    for (int s = 0; s < kQK_K / 32; ++s) {
      const uint8_t* qs = x[i].qs + 16 * s;
      const int8_t* q8 = y[i].qs + 32 * s;
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j) {
        dot += q8[j] * kIq4NlValues[qs[j] & 0xF];
        dot += q8[j + 16] * kIq4NlValues[qs[j] >> 4];
      }
      sum += (d * static_cast<float>(quant::IQ4XSScale(x[i], s))) * static_cast<float>(dot);
    }
  }
  return sum;
}

// ---- plain floats: f32 products summed in double --------------------------------------------

inline float VecDotF32(int64_t n, const float* x, const float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

inline float VecDotF16(int64_t n, const uint16_t* x, const uint16_t* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(F16ToF32(x[i]) * F16ToF32(y[i]));
  return static_cast<float>(sum);
}

inline float VecDotBF16(int64_t n, const uint16_t* x, const uint16_t* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(BF16ToF32(x[i]) * BF16ToF32(y[i]));
  return static_cast<float>(sum);
}

}  // namespace vlmd::engine::kernels::ref
