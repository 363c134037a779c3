// InternVL projector: the ViT's class token dropped, pixel shuffle (space-to-depth) of each tile's
// patch grid by scale_factor s (the element order of projector_idefics3.h's PixelShuffle, which
// is llama.cpp's for InternVL too), then LayerNorm (eps 1e-5, as llama.cpp hard-codes) with
// mm.model.mlp.0, Linear mm.model.mlp.1 + bias, GELU (tanh), Linear mm.model.mlp.3 + bias:
// [side x side (+1), D] -> [(side/s)^2, D*s*s] -> [(side/s)^2, n_embd].
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/models/clip_vit.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

class InternVlProjector {
 public:
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }  // packed copies
  ops::PackingSummary packing() const { return ops::SummarizePacking(packed_); }
  uint64_t released_bytes() const { return released_; }  // GGUF pages dropped after packing
  // Reads mm.model.mlp.{0,1,3}.{weight,bias}. NOT_FOUND / INVALID_ARGUMENT naming the tensor.
  static Result<std::unique_ptr<InternVlProjector>> Load(const gguf::GgufFile& file,
                                                         const VisionConfig& config,
                                                         const ops::WeightPacking& packing = {});

  int64_t tokens_per_tile(const ClipVit& vit) const { return vit.config().merged_tokens_per_tile(); }

  // vit_out [n_tiles * vit.n_positions(), d_vit] -> out [n_tiles * tokens_per_tile, n_embd].
  Status Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles, VisionContext* ctx,
                 float* out) const;

 private:
  InternVlProjector() = default;
  F32Weights norm_w_, norm_b_;  // [D * s * s]
  ops::WeightView w1_, w3_;             // [D*s*s -> n_embd], [n_embd -> n_embd]
  F32Weights b1_, b3_;
  ops::PackedStore packed_;
  uint64_t released_ = 0;
};

}  // namespace vlmd::engine::models
