// Full (non-causal) self-attention of a vision transformer, shared by every ViT family: rows are
// grouped in spans (the tiles of a tiled image, the windows of Qwen2.5-VL's windowed layers, or
// one whole image) and a row attends to the rows of its own span only.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "engine/models/vision_context.h"

namespace vlmd::engine::models {

struct RowSpan {
  int64_t start = 0;  // first row
  int64_t len = 0;    // rows
};

// ctx->q, ctx->k, ctx->v: [n, d_model] with n_heads heads of head_dim side by side (n = the end
// of the last span); writes ctx->attn [n, d_model] for the rows the spans cover. Numerics as
// llama.cpp's encoder (flash attention): K and V cast to F16, Q rounded to F16 in place, f32
// accumulation, scale applied to the scores. Spans must not overlap. INVALID_ARGUMENT on bad
// shapes or an empty span.
Status VitSpanAttention(VisionContext* ctx, std::span<const RowSpan> spans, int64_t d_model,
                        int64_t n_heads, int64_t head_dim, float scale);

// The same on the tile unit (fast precision; the table's tile_attention): bf16 rows of
// ctx->q16 / k16 / v16 [n, TileRowStride(d_model)], the queries pre-scaled by
// TileQueryScale(head_dim), to bf16 rows of ctx->attn16. The buffers must hold whole 32-row
// blocks past the last row (in-place query reads). One job per (span, head): K and V of the
// head are packed once as tile operands, then the fused kernel runs every query of the span.
// UNIMPLEMENTED without the tile kernels.
Status VitSpanAttentionTiles(VisionContext* ctx, std::span<const RowSpan> spans, int64_t d_model,
                             int64_t n_heads, int64_t head_dim);

}  // namespace vlmd::engine::models
