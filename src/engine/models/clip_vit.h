// The CLIP / SigLIP vision transformer of an mmproj GGUF: patch embedding (a stride = patch
// convolution computed as a matmul over unfolded patches), optional class token, learned position
// embeddings, optional pre-LN, n x [LN1, MHA with biases, residual, LN2, FFN, residual], optional
// post-LN. Several tiles are encoded in one call (their rows share every matmul); the blocks are
// vit_block.h's, each tile's rows one attention span.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/vision_config.h"
#include "engine/models/vision_context.h"
#include "engine/models/vit_block.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

class ClipVit {
 public:
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }  // packed copies
  ops::PackingSummary packing() const { return ops::SummarizePacking(packed_); }
  uint64_t released_bytes() const { return released_; }  // GGUF pages dropped after packing
  // Validates every tensor's presence and shape against `config`. `file` must outlive the ViT
  // (weights are views into its mapping). NOT_FOUND / INVALID_ARGUMENT naming the tensor.
  static Result<std::unique_ptr<ClipVit>> Load(const gguf::GgufFile& file,
                                               const VisionConfig& config,
                                               const ops::WeightPacking& packing = {});

  const VisionConfig& config() const { return config_; }
  bool has_class_token() const { return !class_embd_.empty(); }
  // Rows per tile in the output: patches, then the class token if any (llama.cpp's order).
  int64_t n_positions() const { return n_positions_; }
  // Blocks actually run (LLaVA uses the output of the second-to-last block).
  int32_t n_layers_used() const { return n_layers_used_; }

  // pixels: n_tiles tiles, each planar [3][image_size][image_size] normalized f32 (caller-owned).
  // out: [n_tiles * n_positions, d_model] f32 (caller-owned). INVALID_ARGUMENT for n_tiles < 1
  // or null buffers; INTERNAL when a NaN/Inf appears in the output.
  Status Encode(const float* pixels, int64_t n_tiles, VisionContext* ctx, float* out) const;
  // Whether Encode runs the blocks on bf16 tiles with `kt` (fast precision, every block weight
  // packed as tiles, the table with the tile kernels); else on f32 activations.
  bool UsesTileBlocks(const kernels::KernelTable& kt) const;

 private:
  ClipVit() = default;
  void Unfold(const float* pixels, int64_t n_tiles, float* patches) const;

  VisionConfig config_;
  int64_t n_positions_ = 0;
  int32_t n_layers_used_ = 0;
  VitBlockSpec block_;
  ops::PackedStore packed_;             // owns what the views' `packed` point at
  uint64_t released_ = 0;               // GGUF pages of packed matrices, dropped at load
  ops::WeightView patch_w_;             // [d_model, 3 * patch * patch]
  F32Weights patch_b_;                  // [d_model] or empty
  F32Weights class_embd_;               // [d_model] or empty
  F32Weights pos_embd_;                 // [n_positions, d_model]
  F32Weights pre_ln_w_, pre_ln_b_, post_ln_w_, post_ln_b_;  // empty when absent
  std::vector<VitBlockWeights> layers_;
};

}  // namespace vlmd::engine::models
