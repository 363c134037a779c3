// The Qwen VL vision encoders (qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger) as llama.cpp
// runs them (tools/mtmd/models/qwen2vl.cpp, qwen3vl.cpp @3f545be; ../shared/docs/FAMILIES.md):
// one dynamic-size image, patches embedded by two summed convolutions and kept in 2x2
// merge-unit order, 2-D RoPE in every block, LayerNorm (2-VL, 3-VL) or RMSNorm (2.5-VL), window
// attention in 2.5-VL's windowed layers, learned positions resized to the grid and deepstack
// features in 3-VL, and the merger: norm, 4 patches concatenated, mm.0 -> GELU -> mm.2. The
// blocks are vit_block.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/models/vision_config.h"
#include "engine/models/vision_context.h"
#include "engine/models/vit_block.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

class QwenVit {
 public:
  // Validates every tensor's presence and shape against `config` (a Qwen VL projector). `file`
  // must outlive the encoder. NOT_FOUND / INVALID_ARGUMENT naming the tensor.
  static Result<std::unique_ptr<QwenVit>> Load(const gguf::GgufFile& file,
                                               const VisionConfig& config,
                                               const ops::WeightPacking& packing = {});

  const VisionConfig& config() const { return config_; }
  // Deepstack layers (3-VL): each adds projection_dim values to every output row.
  int32_t n_deepstack() const { return static_cast<int32_t>(deepstack_.size()); }
  // Width of an output row: the merger's projection_dim, then each deepstack layer's.
  int64_t n_embd_out() const { return int64_t{config_.projection_dim} * (1 + n_deepstack()); }
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }
  ops::PackingSummary packing() const { return ops::SummarizePacking(packed_); }
  uint64_t released_bytes() const { return released_; }

  // pixels: planar [3][height][width] normalized f32 (PreprocessImage), width and height
  // multiples of patch_size * 2. out: [(width / 2p) * (height / 2p), n_embd_out()] (caller-owned),
  // the merged tokens in raster order. ctx holds scratch only (no state between calls).
  // INVALID_ARGUMENT for bad sizes or null buffers; INTERNAL on NaN/Inf.
  Status Encode(const float* pixels, int32_t width, int32_t height, VisionContext* ctx,
                float* out) const;

  // The same in work units, for a scheduler that interleaves them with decode steps: Begin
  // (patch embedding), one RunBlock per ViT block in order, then Finish (merger, output). The
  // state owns the residual stream between calls; ctx is scratch only. Same errors as Encode.
  struct State;
  Result<std::unique_ptr<State>> Begin(const float* pixels, int32_t width, int32_t height,
                                       VisionContext* ctx) const;
  Status RunBlock(State* state, VisionContext* ctx) const;
  Status Finish(State* state, VisionContext* ctx, float* out) const;
  // Blocks still to run before Finish.
  static int32_t BlocksLeft(const State& state);
  // Whether the blocks run on the tile unit with `kt` (fast precision, every block weight packed
  // as bf16 tiles, the table with the tile kernels): bf16 activations between the products and
  // attention on tiles; else f32 activations (and the attention of AttendF32).
  bool UsesTileBlocks(const kernels::KernelTable& kt) const;

 private:
  // A 3-VL deepstack merger after block `layer`: LayerNorm(4 d_model) -> fc1 -> GELU -> fc2 on
  // merged rows.
  struct DeepstackMerger {
    int32_t layer = 0;
    F32Weights norm_w, norm_b, fc1_b, fc2_b;
    ops::WeightView fc1, fc2;
  };

  QwenVit() = default;
  // The spans block l attends within: 2.5-VL's windows in its windowed blocks, else `whole`.
  std::span<const ops::RowSpan> AttentionSpans(int32_t l, const State& st,
                                          std::span<const ops::RowSpan> whole) const;
  // After block l: its deepstack features (3-VL layers that have them; else nothing).
  Status Deepstack(int32_t l, State* st, VisionContext* ctx) const;
  // The two-layer MLP of the merger and of deepstack layers: out = w2(GELU(w1 in + b1)) + b2.
  Status Mlp(const ops::WeightView& w1, const F32Weights& b1, const ops::WeightView& w2,
             const F32Weights& b2, const float* in, int64_t rows, VisionContext* ctx,
             float* out, int64_t ldo) const;

  VisionConfig config_;
  VitBlockSpec block_;
  ops::PackedStore packed_;
  uint64_t released_ = 0;
  ops::WeightView patch_w0_, patch_w1_;   // [d_model, 3 p p] each: the two temporal slices
  F32Weights patch_b_;                    // [d_model] (3-VL) or empty
  F32Weights pos_embd_;                   // [side * side, d_model] (3-VL) or empty
  int32_t pos_side_ = 0;                  // side of the learned position grid
  F32Weights post_ln_w_, post_ln_b_;
  ops::WeightView mm0_, mm2_;             // [4d, 4d], [4d -> projection_dim]
  F32Weights mm0_b_, mm2_b_;
  std::vector<VitBlockWeights> blocks_;
  std::vector<DeepstackMerger> deepstack_;  // by layer, ascending
};

// An image between QwenVit::Begin and Finish.
struct QwenVit::State {
  int32_t width = 0, height = 0, next_layer = 0, n_layers = 0;
  // The blocks on the tile unit with `kernels` (VitBlocksOnTiles), decided at the first block.
  const kernels::KernelTable* kernels = nullptr;
  bool on_tiles = false;
  int64_t n = 0, n_tok = 0;          // patch rows, merged tokens
  std::vector<int32_t> units;         // the merged token of each group of 4 rows (raster index)
  std::vector<ops::RowSpan> windows;       // 2.5-VL: each window's rows
  std::vector<float> x;               // [n, d_model] residual stream
  std::vector<float> rope;            // [n, head_dim] 2-D RoPE table
  std::vector<std::vector<float>> deepstack;  // [n_tok, projection_dim] per deepstack layer
};

// llama.cpp's bilinear align-corners resize (ggml_interpolate with GGML_SCALE_MODE_BILINEAR |
// GGML_SCALE_FLAG_ALIGN_CORNERS) of a side x side grid of d-vectors [side * side, d] to
// width x height: out [height * width, d], raster order. A grid already side x side is copied.
std::vector<float> ResizePositionGrid(std::span<const float> grid, int32_t side, int64_t d,
                                      int32_t width, int32_t height);

}  // namespace vlmd::engine::models
