// The vision side of a VLM: an mmproj GGUF's ViT + projector behind one interface. Encodes
// preprocessed tiles (see preprocess_vision.h) into text-model input embeddings.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/models/clip_vit.h"
#include "engine/models/projector_idefics3.h"
#include "engine/models/preprocess_vision.h"
#include "engine/models/projector_mlp.h"
#include "engine/models/qwen_vit.h"
#include "engine/models/vision_config.h"

namespace vlmd::engine::models {

class VisionEncoder {
 public:
  // Reads the config and validates every tensor. Keeps `file` alive. UNIMPLEMENTED for unknown
  // projector types; NOT_FOUND / INVALID_ARGUMENT naming a missing or misshapen tensor or key.
  // `packing`: see ops::PackWeight (the ViT's and the projector's matrices).
  static Result<std::unique_ptr<VisionEncoder>> Load(std::shared_ptr<const gguf::GgufFile> file,
                                                     const ops::WeightPacking& packing = {});

  const VisionConfig& config() const { return config_; }
  // Visual tokens per tile of the tiled families; 0 for Qwen VL (dynamic size: ImageTokens).
  int64_t tokens_per_tile() const { return tokens_per_tile_; }
  // Width of an output row = the text model's input width (n_embd_inp: d_model, times 1 +
  // deepstack layers for Qwen3-VL).
  int64_t n_embd() const { return qwen_ ? qwen_->n_embd_out() : config_.projection_dim; }
  // The CLIP / SigLIP ViT of the tiled families; nullptr for Qwen VL.
  const ClipVit* vit() const { return vit_.get(); }
  // Visual tokens of a preprocessed image (every tile, or a Qwen VL image's merged grid).
  int64_t ImageTokens(const PreprocessedImage& image) const;
  // Encodes all of `image` into out [ImageTokens(image), n_embd()] (caller-owned). Same errors
  // as Encode.
  Status EncodeImage(const PreprocessedImage& image, VisionContext* ctx, float* out) const;
  // Memory the weights hold: the mapped GGUF file plus the packed copies.
  uint64_t memory_bytes() const;

  // tiles: n_tiles planar normalized tiles [3][image_size][image_size] (caller-owned), encoded
  // in batches of about kRowsPerBatch patch rows (at least one tile): activation memory grows
  // with the rows of a batch, and ~1000 rows already keep the matmuls compute-bound while the
  // activations stay in cache (SigLIP-B at 512 px: 1 tile per batch ran 188 ms per tile, 2 tiles
  // 208, all 17 of an image 256). out: [n_tiles * tokens_per_tile(), n_embd()] (caller-owned), tile t's tokens
  // at rows [t * tokens_per_tile, (t + 1) * tokens_per_tile). Stateless between calls: ctx holds
  // scratch only. INVALID_ARGUMENT for n_tiles < 1 or null buffers; INTERNAL on NaN/Inf.
  Status Encode(const float* tiles, int64_t n_tiles, VisionContext* ctx, float* out) const;
  static constexpr int64_t kRowsPerBatch = 1024;

  // Convenience: allocates the output.
  Result<std::vector<float>> Encode(const float* tiles, int64_t n_tiles, VisionContext* ctx) const;

 private:
  VisionEncoder() = default;
  std::shared_ptr<const gguf::GgufFile> file_;
  VisionConfig config_;
  std::unique_ptr<ClipVit> vit_;
  std::unique_ptr<MlpProjector> mlp_;
  std::unique_ptr<Idefics3Projector> idefics3_;
  std::unique_ptr<QwenVit> qwen_;
  int64_t tokens_per_tile_ = 0;
};

}  // namespace vlmd::engine::models
