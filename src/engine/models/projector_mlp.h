// LLaVA's "mlp" projector: mm.0 -> GELU -> mm.2 (with biases) applied to the ViT's patch rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/models/clip_vit.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

class MlpProjector {
 public:
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }  // packed copies
  ops::PackingSummary packing() const { return ops::SummarizePacking(packed_); }
  uint64_t released_bytes() const { return released_; }  // GGUF pages dropped after packing
  // Reads mm.0.{weight,bias} [d_vit -> hidden] and mm.2.{weight,bias} [hidden -> n_embd_text].
  // NOT_FOUND / INVALID_ARGUMENT naming the tensor.
  static Result<std::unique_ptr<MlpProjector>> Load(const gguf::GgufFile& file,
                                                    const VisionConfig& config,
                                                    const ops::WeightPacking& packing = {});

  // Tokens per tile: one per patch.
  int64_t tokens_per_tile(const ClipVit& vit) const { return vit.config().n_patches(); }

  // vit_out [n_tiles * vit.n_positions(), d_vit] -> out [n_tiles * tokens_per_tile, n_embd].
  Status Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles, VisionContext* ctx,
                 float* out) const;

 private:
  MlpProjector() = default;
  ops::WeightView w0_, w2_;
  ops::PackedStore packed_;
  uint64_t released_ = 0;
  F32Weights b0_, b2_;
};

}  // namespace vlmd::engine::models
