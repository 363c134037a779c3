// The vision side of a VLM: an mmproj GGUF's ViT + projector behind one interface. Encodes
// preprocessed tiles (see preprocess_vision.h) into text-model input embeddings.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/models/clip_vit.h"
#include "engine/models/projector_gemma3.h"
#include "engine/models/projector_idefics3.h"
#include "engine/models/projector_internvl.h"
#include "engine/models/preprocess_vision.h"
#include "engine/models/projector_mlp.h"
#include "engine/models/qwen_vit.h"
#include "engine/models/vision_config.h"

namespace vlmd::engine::models {

// What an image becomes, from its size alone (no pixels): the family's decision at a shrink
// level. Level 0 is the model's own size; each level up is one of the family's steps smaller
// (Idefics3: one tile less on the longest edge; Qwen VL: one 28-pixel unit less on the longest
// side, aspect kept); fixed-size families have level 0 only.
struct ImagePlan {
  int32_t level = 0;
  int32_t width = 0;   // pixels the encoder's preprocessing produces (tiled: the refined image)
  int32_t height = 0;
  // The layout PreprocessImage will give (PreprocessedImage without pixels): what the prompt
  // builder needs to count and wrap the image's rows.
  PreprocessedImage layout;
  int64_t rows = 0;        // visual embedding rows in the prompt (wrapper text tokens excluded)
  int64_t work_units = 0;  // ImageEncoding units
  // The family parameter that selects this size, passed to PreprocessImage: Idefics3's longest
  // edge, Qwen VL's token limit, LLaVA-1.6's most slices (-1: the overview alone); 0 at level 0.
  int32_t limit = 0;
};

// An image being encoded one work unit at a time (VisionEncoder::BeginEncode / EncodeUnits), so
// that a scheduler can interleave the units with decode steps: a unit is a tile of the tiled
// families; for Qwen VL the patch embedding with the first ViT block, each further block, and
// the merger. Owns the partial results; the preprocessed image must outlive it.
class ImageEncoding {
 public:
  ~ImageEncoding();
  int64_t total_units() const { return total_; }
  int64_t done_units() const { return next_; }
  bool done() const { return next_ == total_; }
  // The embeddings [ImageTokens, n_embd] once done(); empty before.
  std::vector<float> TakeEmbeddings() { return done() ? std::move(out_) : std::vector<float>(); }

 private:
  friend class VisionEncoder;
  ImageEncoding() = default;
  const PreprocessedImage* image_ = nullptr;
  int64_t total_ = 0;
  int64_t next_ = 0;
  std::vector<float> out_;
  std::unique_ptr<QwenVit::State> qwen_;
};

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
  // Whether the ViT blocks run on the tile unit with `kt` (ClipVit / QwenVit::UsesTileBlocks).
  bool UsesTileBlocks(const kernels::KernelTable& kt) const {
    return vit_ ? vit_->UsesTileBlocks(kt) : qwen_->UsesTileBlocks(kt);
  }
  // Visual tokens of a preprocessed image (every tile, or a Qwen VL image's merged grid).
  int64_t ImageTokens(const PreprocessedImage& image) const;
  // The highest shrink level of a width x height image (0: it cannot shrink), and its plan at a
  // level in [0, MaxShrinkLevel] (higher levels are clamped).
  int32_t MaxShrinkLevel(int32_t width, int32_t height) const;
  ImagePlan PlanImage(int32_t width, int32_t height, int32_t level) const;
  // The plans of every level, [0, MaxShrinkLevel] (the levels' limits computed once: Qwen's are
  // a search each).
  std::vector<ImagePlan> PlanLevels(int32_t width, int32_t height) const;
  // Preprocesses `image` as `plan` says (a plan of this image's size). Errors as PreprocessImage.
  Result<PreprocessedImage> Preprocess(RgbView image, const ImagePlan& plan) const;
  // Encodes all of `image` into out [ImageTokens(image), n_embd()] (caller-owned). Same errors
  // as Encode.
  Status EncodeImage(const PreprocessedImage& image, VisionContext* ctx, float* out) const;

  // Work units of `image` (see ImageEncoding).
  int64_t WorkUnits(const PreprocessedImage& image) const;
  // Starts encoding `image` in work units (it must outlive the result). INVALID_ARGUMENT for an
  // image this encoder cannot take.
  Result<std::unique_ptr<ImageEncoding>> BeginEncode(const PreprocessedImage& image) const;
  // Runs up to max_units (>= 1) more units of `enc`. Same errors as Encode; after an error the
  // encoding is unusable.
  Status EncodeUnits(ImageEncoding* enc, int64_t max_units, VisionContext* ctx) const;
  // Memory the weights hold: the mapped GGUF file plus the packed copies.
  uint64_t memory_bytes() const;
  // How the tower's and projector's matrices were packed (ops::PackingSummary).
  ops::PackingSummary packing() const;

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
  // The ViT and projector of config_'s family (Load's part between the config and the check that
  // every tensor of the file was read).
  Status LoadTower(const gguf::GgufFile& f, const ops::WeightPacking& packing);
  // The family parameter of levels 1.. (ImagePlan::limit), as many as the image can shrink.
  std::vector<int32_t> LevelLimits(int32_t width, int32_t height) const;
  ImagePlan PlanWithLimit(int32_t width, int32_t height, int32_t level, int32_t limit) const;
  std::shared_ptr<const gguf::GgufFile> file_;
  VisionConfig config_;
  std::unique_ptr<ClipVit> vit_;
  std::unique_ptr<MlpProjector> mlp_;
  std::unique_ptr<Idefics3Projector> idefics3_;
  std::unique_ptr<InternVlProjector> internvl_;
  std::unique_ptr<Gemma3Projector> gemma3_;
  std::unique_ptr<QwenVit> qwen_;
  int64_t tokens_per_tile_ = 0;
};

}  // namespace vlmd::engine::models
