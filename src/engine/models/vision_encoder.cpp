// Vision facade: ViT + projector dispatch (see vision_encoder.h).
#include "engine/models/vision_encoder.h"

#include <algorithm>

namespace vlmd::engine::models {

Result<std::unique_ptr<VisionEncoder>> VisionEncoder::Load(
    std::shared_ptr<const gguf::GgufFile> file, const ops::WeightPacking& packing) {
  if (file == nullptr) return InvalidArgumentError("null mmproj file");
  std::unique_ptr<VisionEncoder> e(new VisionEncoder());
  e->file_ = std::move(file);
  const gguf::GgufFile& f = *e->file_;
  VLMD_ASSIGN_OR_RETURN(e->config_, ReadVisionConfig(f));
  // Every vision matmul has hundreds of rows (patches): compute-bound, so in fast precision the
  // float weights go to the AMX tile unit where there is one.
  ops::WeightPacking vision_packing = packing;
  vision_packing.bf16_tiles = true;
  if (IsQwenVl(e->config_.projector)) {
    VLMD_ASSIGN_OR_RETURN(e->qwen_, QwenVit::Load(f, e->config_, vision_packing));
    return e;
  }
  VLMD_ASSIGN_OR_RETURN(e->vit_, ClipVit::Load(f, e->config_, vision_packing));
  switch (e->config_.projector) {
    case ProjectorType::kMlp: {
      VLMD_ASSIGN_OR_RETURN(e->mlp_, MlpProjector::Load(f, e->config_, vision_packing));
      e->tokens_per_tile_ = e->mlp_->tokens_per_tile(*e->vit_);
      break;
    }
    case ProjectorType::kIdefics3: {
      VLMD_ASSIGN_OR_RETURN(e->idefics3_, Idefics3Projector::Load(f, e->config_, vision_packing));
      e->tokens_per_tile_ = e->idefics3_->tokens_per_tile(*e->vit_);
      break;
    }
    default:
      return InternalError("vision projector without an encoder");
  }
  return e;
}

int64_t VisionEncoder::ImageTokens(const PreprocessedImage& image) const {
  if (qwen_) return int64_t{image.grid_cols} * image.grid_rows;
  return image.n_tiles * tokens_per_tile_;
}

Status VisionEncoder::EncodeImage(const PreprocessedImage& image, VisionContext* ctx,
                                  float* out) const {
  if (qwen_) {
    if (image.n_tiles != 1 ||
        static_cast<int64_t>(image.pixels.size()) != 3 * int64_t{image.width} * image.height) {
      return InvalidArgumentError("qwen vision encode: not one preprocessed image");
    }
    return qwen_->Encode(image.pixels.data(), image.width, image.height, ctx, out);
  }
  return Encode(image.pixels.data(), image.n_tiles, ctx, out);
}

uint64_t VisionEncoder::memory_bytes() const {
  uint64_t b = file_->file_size();
  if (vit_) b += vit_->packed_bytes() - vit_->released_bytes();
  if (qwen_) b += qwen_->packed_bytes() - qwen_->released_bytes();
  if (mlp_) b += mlp_->packed_bytes() - mlp_->released_bytes();
  if (idefics3_) b += idefics3_->packed_bytes() - idefics3_->released_bytes();
  return b;
}

Status VisionEncoder::Encode(const float* tiles, int64_t n_tiles, VisionContext* ctx,
                             float* out) const {
  if (n_tiles < 1 || tiles == nullptr || out == nullptr || ctx == nullptr) {
    return InvalidArgumentError("vision encode: no tiles or null buffers");
  }
  if (!vit_) return InvalidArgumentError("vision encode: a Qwen VL image is encoded whole (EncodeImage)");
  const int64_t tile_values = 3 * static_cast<int64_t>(config_.image_size) * config_.image_size;
  const int64_t out_per_tile = tokens_per_tile_ * n_embd();
  const int64_t batch = std::max<int64_t>(1, kRowsPerBatch / vit_->n_positions());
  std::vector<float> vit_out(static_cast<size_t>(std::min(n_tiles, batch) *
                                                 vit_->n_positions() * config_.d_model));
  for (int64_t t0 = 0; t0 < n_tiles; t0 += batch) {
    const int64_t nt = std::min(batch, n_tiles - t0);
    VLMD_RETURN_IF_ERROR(vit_->Encode(tiles + t0 * tile_values, nt, ctx, vit_out.data()));
    float* o = out + t0 * out_per_tile;
    VLMD_RETURN_IF_ERROR(mlp_ != nullptr ? mlp_->Project(*vit_, vit_out.data(), nt, ctx, o)
                                         : idefics3_->Project(*vit_, vit_out.data(), nt, ctx, o));
  }
  return Status::Ok();
}

Result<std::vector<float>> VisionEncoder::Encode(const float* tiles, int64_t n_tiles,
                                                 VisionContext* ctx) const {
  if (n_tiles < 1) return InvalidArgumentError("vision encode: no tiles");
  std::vector<float> out(static_cast<size_t>(n_tiles * tokens_per_tile_ * n_embd()));
  VLMD_RETURN_IF_ERROR(Encode(tiles, n_tiles, ctx, out.data()));
  return out;
}

}  // namespace vlmd::engine::models
