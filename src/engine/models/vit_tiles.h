// Helpers of the ViT blocks on the AMX tile unit (fast precision), shared by the CLIP / SigLIP
// and the Qwen VL encoders: bf16 activation rows padded for whole-tile reads, and the scale the
// fused attention kernel wants on its queries.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/kernels/tile_bf16.h"
#include "engine/models/clip_vit.h"

namespace vlmd::engine::models {

inline int64_t RoundUpTo(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// A bf16 buffer of `rows` rows of `stride` values whose rows [valid, rows) are zero (tile loads
// read whole 16-row tiles; the padding rows only feed outputs that are never written).
inline uint16_t* Bf16Rows(Bf16Buffer* buf, int64_t rows, int64_t valid, int64_t stride) {
  buf->resize(static_cast<size_t>(rows * stride));
  std::fill(buf->data() + valid * stride, buf->data() + rows * stride, uint16_t{0});
  return buf->data();
}

// Zeroes columns [width, width rounded up to 32) of rows [0, rows): the tile products read whole
// 32-value steps, and the weights' padding is zero only where the activations' is too (a NaN
// left there by an earlier call would still poison the sums).
inline void ZeroPadColumns(uint16_t* buf, int64_t rows, int64_t stride, int64_t width) {
  const int64_t padded = kernels::TileBf16Matrix::PaddedK(width);
  if (padded == width) return;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(buf + r * stride + width, buf + r * stride + padded, uint16_t{0});
  }
}

// The tile attention's query scale: 1 / sqrt(head_dim), times log2(e) for the base-2 softmax of
// the fused kernel.
inline float TileQueryScale(int64_t head_dim) {
  return 1.44269504f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace vlmd::engine::models
