// Vision facade: ViT + projector dispatch (see vision_encoder.h).
#include "engine/models/vision_encoder.h"

#include <algorithm>
#include <array>
#include <functional>
#include <vector>

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
  VLMD_RETURN_IF_ERROR(e->LoadTower(f, vision_packing));
  VLMD_RETURN_IF_ERROR(RefuseUnusedTensors(f, "vision model"));
  return e;
}

Status VisionEncoder::LoadTower(const gguf::GgufFile& f, const ops::WeightPacking& packing) {
  if (IsQwenVl(config_.projector)) {
    VLMD_ASSIGN_OR_RETURN(qwen_, QwenVit::Load(f, config_, packing));
    return Status::Ok();
  }
  VLMD_ASSIGN_OR_RETURN(vit_, ClipVit::Load(f, config_, packing));
  switch (config_.projector) {
    case ProjectorType::kMlp: {
      VLMD_ASSIGN_OR_RETURN(mlp_, MlpProjector::Load(f, config_, packing));
      tokens_per_tile_ = mlp_->tokens_per_tile(*vit_);
      return Status::Ok();
    }
    case ProjectorType::kIdefics3: {
      VLMD_ASSIGN_OR_RETURN(idefics3_, Idefics3Projector::Load(f, config_, packing));
      tokens_per_tile_ = idefics3_->tokens_per_tile(*vit_);
      return Status::Ok();
    }
    case ProjectorType::kGemma3: {
      VLMD_ASSIGN_OR_RETURN(gemma3_, Gemma3Projector::Load(f, config_, packing));
      tokens_per_tile_ = gemma3_->tokens_per_tile(*vit_);
      return Status::Ok();
    }
    case ProjectorType::kInternvl: {
      VLMD_ASSIGN_OR_RETURN(internvl_, InternVlProjector::Load(f, config_, packing));
      tokens_per_tile_ = internvl_->tokens_per_tile(*vit_);
      return Status::Ok();
    }
    default:
      return InternalError("vision projector without an encoder");
  }
}

ImageEncoding::~ImageEncoding() = default;

namespace {

// Qwen VL's shrink levels, as token limits for its smart resize (QwenResizedSize's max_tokens):
// level L + 1's is the largest limit below level L's whose size is smaller than level L's, i.e.
// the next smaller size the resize gives this image (one 28-pixel unit off one side: the resize
// floors both), down to the family's minimum of min_tokens merged tokens. limits[L - 1] is level
// L's. The merged token count never falls as the limit grows, so each level is a binary search
// below the last limit (a search below the last row count missed sizes: limits between the two
// can give smaller sizes too). (A limit that took L units off the longest side, squared, skipped
// sizes and could end below the minimum.)
std::vector<int32_t> QwenLimits(const VisionConfig& c, int32_t width, int32_t height) {
  const int32_t align = c.patch_size * c.spatial_merge;
  auto rows_at = [&](int64_t limit) {
    int32_t w = 0, h = 0;
    QwenResizedSize(c, width, height, static_cast<int32_t>(limit), &w, &h);
    return int64_t{w / align} * (h / align);
  };
  std::vector<int32_t> limits;
  int64_t rows = rows_at(0), limit = c.max_tokens;
  while (limit - 1 >= c.min_tokens && rows_at(c.min_tokens) < rows) {
    int64_t lo = c.min_tokens, hi = limit - 1;  // rows_at(lo) < rows
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (rows_at(mid) < rows) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const int64_t next = rows_at(lo);
    if (next < c.min_tokens) break;
    limits.push_back(static_cast<int32_t>(lo));
    rows = next;
    limit = lo;
  }
  return limits;
}

// Fitted to a grid, sliced, plus an overview: LLaVA-1.6 and InternVL.
bool IsAnyres(const VisionConfig& c) {
  return (c.projector == ProjectorType::kMlp || c.projector == ProjectorType::kInternvl) &&
         !c.grid_pinpoints.empty();
}

// anyres (LLaVA-1.6) shrink levels, as PreprocessOptions::max_slices: each level's fit has fewer
// slices than the one before (limits from the pinpoints' slice counts below the level-0 choice,
// largest first), the last one none (the overview alone). Empty for an image that is
// its overview anyway.
std::vector<int32_t> AnyresLevels(const VisionConfig& c, int32_t width, int32_t height) {
  const int32_t s = c.image_size;
  if (width <= s && height <= s) return {};
  const std::array<int32_t, 2> chosen = SelectBestResolution(width, height, c.grid_pinpoints, s, 0);
  const int32_t n0 = (chosen[0] / s) * (chosen[1] / s);
  std::vector<int32_t> counts;
  for (const auto& [pw, ph] : c.grid_pinpoints) {
    const int32_t n = (pw / s) * (ph / s);
    if (n < n0) counts.push_back(n);
  }
  std::sort(counts.begin(), counts.end(), std::greater<>());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  // Only limits that change the fit: a limit of 3 may still pick a 2-slice pinpoint.
  std::vector<int32_t> levels;
  int32_t previous = n0;
  for (int32_t limit : counts) {
    const std::array<int32_t, 2> fit = SelectBestResolution(width, height, c.grid_pinpoints, s, limit);
    const int32_t n = (fit[0] / s) * (fit[1] / s);
    if (n < previous) {
      levels.push_back(limit);
      previous = n;
    }
  }
  levels.push_back(-1);
  return levels;
}

}  // namespace

std::vector<int32_t> VisionEncoder::LevelLimits(int32_t width, int32_t height) const {
  if (width < 1 || height < 1) return {};
  const VisionConfig& c = config_;
  if (c.projector == ProjectorType::kIdefics3) {
    std::vector<int32_t> limits;
    for (int32_t level = 1; level <= (c.preproc_image_size - c.image_size) / c.image_size; ++level) {
      limits.push_back(c.preproc_image_size - level * c.image_size);
    }
    return limits;
  }
  if (IsAnyres(c)) return AnyresLevels(c, width, height);
  if (IsQwenVl(c.projector)) return QwenLimits(c, width, height);
  return {};
}

int32_t VisionEncoder::MaxShrinkLevel(int32_t width, int32_t height) const {
  return static_cast<int32_t>(LevelLimits(width, height).size());
}

std::vector<ImagePlan> VisionEncoder::PlanLevels(int32_t width, int32_t height) const {
  const std::vector<int32_t> limits = LevelLimits(width, height);
  std::vector<ImagePlan> plans;
  for (int32_t level = 0; level <= static_cast<int32_t>(limits.size()); ++level) {
    plans.push_back(PlanWithLimit(width, height, level,
                                  level == 0 ? 0 : limits[static_cast<size_t>(level - 1)]));
  }
  return plans;
}

ImagePlan VisionEncoder::PlanImage(int32_t width, int32_t height, int32_t level) const {
  const std::vector<int32_t> limits = LevelLimits(width, height);
  level = std::clamp(level, 0, static_cast<int32_t>(limits.size()));
  return PlanWithLimit(width, height, level,
                       level == 0 ? 0 : limits[static_cast<size_t>(level - 1)]);
}

ImagePlan VisionEncoder::PlanWithLimit(int32_t width, int32_t height, int32_t level,
                                       int32_t limit) const {
  const VisionConfig& c = config_;
  ImagePlan p;
  p.level = level;
  p.limit = limit;
  if (IsQwenVl(c.projector)) {
    QwenResizedSize(c, width, height, p.limit, &p.width, &p.height);
    const int32_t align = c.patch_size * c.spatial_merge;
    p.rows = int64_t{p.width / align} * (p.height / align);
    p.work_units = int64_t{c.n_layers} + 1;
    p.layout.width = p.width;
    p.layout.height = p.height;
    p.layout.grid_cols = p.width / align;
    p.layout.grid_rows = p.height / align;
    p.layout.n_tiles = 1;
    return p;
  }
  if (IsAnyres(c)) {
    const int32_t s = c.image_size;
    const std::array<int32_t, 2> refined =
        width > s || height > s ? SelectBestResolution(width, height, c.grid_pinpoints, s, p.limit)
                                : std::array<int32_t, 2>{0, 0};
    const int32_t slices = (refined[0] / s) * (refined[1] / s);
    p.width = refined[0] > 0 ? refined[0] : s;  // what the slices are cut from (or the overview)
    p.height = refined[0] > 0 ? refined[1] : s;
    p.work_units = int64_t{slices} + 1;  // + the overview
    p.rows = p.work_units * tokens_per_tile_;
    p.layout.grid_cols = refined[0] / s;
    p.layout.grid_rows = refined[1] / s;
    p.layout.has_global = slices > 0;
  } else if (c.projector == ProjectorType::kIdefics3) {
    Idefics3RefinedSize(width, height, c.image_size, p.limit > 0 ? p.limit : c.preproc_image_size,
                        &p.width, &p.height);
    p.work_units = int64_t{p.width / c.image_size} * (p.height / c.image_size) + 1;  // + global
    p.rows = p.work_units * tokens_per_tile_;
    p.layout.grid_cols = p.width / c.image_size;
    p.layout.grid_rows = p.height / c.image_size;
    p.layout.has_global = true;
  } else {
    p.width = p.height = c.image_size;
    p.work_units = 1;
    p.rows = tokens_per_tile_;
  }
  p.layout.tile_size = p.layout.width = p.layout.height = c.image_size;
  p.layout.n_tiles = p.work_units;
  return p;
}

Result<PreprocessedImage> VisionEncoder::Preprocess(RgbView image, const ImagePlan& plan) const {
  if (IsAnyres(config_)) {
    PreprocessOptions o;
    o.max_slices = plan.limit;
    return PreprocessImage(config_, image, o);
  }
  if (plan.limit <= 0) return PreprocessImage(config_, image);
  if (IsQwenVl(config_.projector)) return PreprocessImage(config_, image, {}, plan.limit);
  VisionConfig c = config_;  // Idefics3: tiled at a smaller longest edge
  c.preproc_image_size = std::max(plan.limit, c.image_size);
  return PreprocessImage(c, image);
}

int64_t VisionEncoder::WorkUnits(const PreprocessedImage& image) const {
  return qwen_ ? int64_t{config_.n_layers} + 1 : image.n_tiles;
}

Result<std::unique_ptr<ImageEncoding>> VisionEncoder::BeginEncode(
    const PreprocessedImage& image) const {
  const int64_t floats = 3 * int64_t{image.width} * image.height;
  if (image.n_tiles < 1 || static_cast<int64_t>(image.pixels.size()) != image.n_tiles * floats ||
      (qwen_ && image.n_tiles != 1)) {
    return InvalidArgumentError("vision encode: the preprocessed image's pixels do not match its layout");
  }
  std::unique_ptr<ImageEncoding> enc(new ImageEncoding());
  enc->image_ = &image;
  enc->total_ = WorkUnits(image);
  enc->out_.resize(static_cast<size_t>(ImageTokens(image) * n_embd()));
  return enc;
}

Status VisionEncoder::EncodeUnits(ImageEncoding* enc, int64_t max_units, VisionContext* ctx) const {
  if (enc == nullptr || max_units < 1 || enc->done()) {
    return InvalidArgumentError("vision encode: no work unit left or max_units < 1");
  }
  const PreprocessedImage& img = *enc->image_;
  const int64_t n = std::min(max_units, enc->total_ - enc->next_);
  if (!qwen_) {  // a unit is a tile
    const int64_t floats = 3 * int64_t{img.width} * img.height;
    const int64_t tile_out = tokens_per_tile_ * n_embd();
    VLMD_RETURN_IF_ERROR(Encode(img.pixels.data() + enc->next_ * floats, n, ctx,
                                enc->out_.data() + enc->next_ * tile_out));
    enc->next_ += n;
    return Status::Ok();
  }
  // Qwen VL: unit 0 = patch embedding + block 0, units 1 .. L-1 = the other blocks, unit L =
  // the merger.
  for (int64_t u = 0; u < n; ++u, ++enc->next_) {
    if (enc->next_ == 0) {
      VLMD_ASSIGN_OR_RETURN(enc->qwen_, qwen_->Begin(img.pixels.data(), img.width, img.height, ctx));
    }
    if (QwenVit::BlocksLeft(*enc->qwen_) > 0) {
      VLMD_RETURN_IF_ERROR(qwen_->RunBlock(enc->qwen_.get(), ctx));
    }
    if (enc->next_ + 1 == enc->total_) {
      VLMD_RETURN_IF_ERROR(qwen_->Finish(enc->qwen_.get(), ctx, enc->out_.data()));
      enc->qwen_.reset();
    }
  }
  return Status::Ok();
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
  if (internvl_) b += internvl_->packed_bytes() - internvl_->released_bytes();
  if (gemma3_) b += gemma3_->packed_bytes() + gemma3_->owned_bytes();
  return b;
}

ops::PackingSummary VisionEncoder::packing() const {
  ops::PackingSummary p;
  if (vit_) p += vit_->packing();
  if (qwen_) p += qwen_->packing();
  if (mlp_) p += mlp_->packing();
  if (idefics3_) p += idefics3_->packing();
  if (internvl_) p += internvl_->packing();
  if (gemma3_) p += gemma3_->packing();
  return p;
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
    VLMD_RETURN_IF_ERROR(mlp_ != nullptr        ? mlp_->Project(*vit_, vit_out.data(), nt, ctx, o)
                         : internvl_ != nullptr ? internvl_->Project(*vit_, vit_out.data(), nt, ctx, o)
                         : gemma3_ != nullptr   ? gemma3_->Project(*vit_, vit_out.data(), nt, ctx, o)
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
