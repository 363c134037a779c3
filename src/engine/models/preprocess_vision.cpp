// Per-projector image preprocessing (see preprocess_vision.h).
#include "engine/models/preprocess_vision.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace vlmd::engine::models {
namespace {

// Appends `img` (tile_size x tile_size) as a planar normalized tile.
void AppendTile(const VisionConfig& c, const RgbImage& img, std::vector<float>* out) {
  const size_t hw = static_cast<size_t>(img.width) * img.height;
  const size_t base = out->size();
  out->resize(base + 3 * hw);
  float* dst = out->data() + base;
  for (size_t i = 0; i < hw; ++i) {
    for (int ch = 0; ch < 3; ++ch) {
      const float v = static_cast<float>(img.rgb[3 * i + ch]) / 255.0f;
      dst[ch * hw + i] = (v - c.image_mean[ch]) / c.image_std[ch];
    }
  }
}

}  // namespace

void QwenResizedSize(const VisionConfig& c, int32_t width, int32_t height, int32_t max_tokens,
                     int32_t* out_width, int32_t* out_height) {
  const int32_t align = c.patch_size * c.spatial_merge;
  const int64_t unit = static_cast<int64_t>(align) * align;
  const int64_t max_pixels = (max_tokens > 0 ? std::min(max_tokens, c.max_tokens) : c.max_tokens) * unit;
  const int64_t min_pixels = std::min<int64_t>(c.min_tokens * unit, max_pixels);
  const float f = static_cast<float>(align);
  auto round_by = [&](float x) { return static_cast<int32_t>(std::round(x / f)) * align; };
  auto ceil_by = [&](float x) { return static_cast<int32_t>(std::ceil(x / f)) * align; };
  auto floor_by = [&](float x) { return static_cast<int32_t>(std::floor(x / f)) * align; };
  int32_t h = std::max(align, round_by(static_cast<float>(height)));
  int32_t w = std::max(align, round_by(static_cast<float>(width)));
  const float area = static_cast<float>(static_cast<int64_t>(height) * width);
  if (static_cast<int64_t>(h) * w > max_pixels) {
    const float beta = std::sqrt(area / static_cast<float>(max_pixels));
    h = std::max(align, floor_by(static_cast<float>(height) / beta));
    w = std::max(align, floor_by(static_cast<float>(width) / beta));
  } else if (static_cast<int64_t>(h) * w < min_pixels) {
    const float beta = std::sqrt(static_cast<float>(min_pixels) / area);
    h = ceil_by(static_cast<float>(height) * beta);
    w = ceil_by(static_cast<float>(width) * beta);
  }
  // Past an aspect ratio of about max_tokens : 1 the short side stays at `align` and the rule
  // above still gives more than max_tokens (llama.cpp then encodes them all: a 50-megapixel
  // 1-pixel-high image would be hundreds of thousands of tokens). The long side is cut to the
  // limit instead; every other image is unchanged.
  if (static_cast<int64_t>(h) * w > max_pixels) {
    if (w >= h) {
      w = std::max<int32_t>(align, static_cast<int32_t>(max_pixels / h / align * align));
    } else {
      h = std::max<int32_t>(align, static_cast<int32_t>(max_pixels / w / align * align));
    }
  }
  *out_width = w;
  *out_height = h;
}

void Idefics3RefinedSize(int32_t width, int32_t height, int32_t align, int32_t longest_edge,
                         int32_t* out_width, int32_t* out_height) {
  const float scale = std::min(static_cast<float>(longest_edge) / width,
                               static_cast<float>(longest_edge) / height);
  auto ceil_to = [align](float v) {
    return static_cast<int32_t>(std::ceil(v / static_cast<float>(align))) * align;
  };
  *out_width = ceil_to(static_cast<float>(width) * scale);
  *out_height = ceil_to(static_cast<float>(height) * scale);
}

std::array<int32_t, 2> SelectBestResolution(int32_t width, int32_t height,
                                            const std::vector<std::array<int32_t, 2>>& pinpoints,
                                            int32_t slice, int32_t max_slices) {
  std::array<int32_t, 2> best{0, 0};
  int64_t best_effective = 0;
  int64_t least_waste = std::numeric_limits<int64_t>::max();
  for (const auto& [pw, ph] : pinpoints) {
    if (max_slices < 0 || (max_slices > 0 && int64_t{pw / slice} * (ph / slice) > max_slices)) continue;
    // The fit's size as llama.cpp computes it: a float scale, each side truncated.
    const float scale = std::min(static_cast<float>(pw) / width, static_cast<float>(ph) / height);
    const int64_t fit_w = static_cast<int64_t>(static_cast<float>(width) * scale);
    const int64_t fit_h = static_cast<int64_t>(static_cast<float>(height) * scale);
    const int64_t effective = std::min(fit_w * fit_h, int64_t{width} * height);
    const int64_t waste = int64_t{pw} * ph - effective;
    if (effective > best_effective || (effective == best_effective && waste < least_waste)) {
      best_effective = effective;
      least_waste = waste;
      best = {pw, ph};
    }
  }
  return best;
}

Result<PreprocessedImage> PreprocessImage(const VisionConfig& c, RgbView image,
                                          const PreprocessOptions& o, int32_t qwen_max_tokens) {
  if (image.width < 1 || image.height < 1 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return InvalidArgumentError("image of " + std::to_string(image.width) + "x" +
                                std::to_string(image.height) + " with " +
                                std::to_string(image.rgb.size()) + " bytes is not packed RGB");
  }
  PreprocessedImage out;
  if (IsQwenVl(c.projector)) {
    int32_t w = 0, h = 0;
    QwenResizedSize(c, image.width, image.height, qwen_max_tokens, &w, &h);
    // Same size: a plain copy; otherwise aspect-preserving bilinear with black padding.
    const RgbImage resized = ResizeWithPadding(image, w, h, ResizeAlgo::kBilinear, {0, 0, 0});
    AppendTile(c, resized, &out.pixels);
    out.width = w;
    out.height = h;
    out.grid_cols = w / (c.patch_size * c.spatial_merge);  // the merged token grid
    out.grid_rows = h / (c.patch_size * c.spatial_merge);
    out.n_tiles = 1;
    return out;
  }
  const int32_t s = c.image_size;
  out.tile_size = s;
  out.width = s;
  out.height = s;
  if (!c.grid_pinpoints.empty()) {
    // anyres (LLaVA-1.6) and InternVL: slices of the best grid fit, then the overview.
    const std::array<int32_t, 2> refined =
        image.width > s || image.height > s
            ? SelectBestResolution(image.width, image.height, c.grid_pinpoints, s, o.max_slices)
            : std::array<int32_t, 2>{0, 0};
    if (refined[0] > 0) {
      const RgbImage fitted = ResizeWithPadding(image, refined[0], refined[1], o.refine_algo, {0, 0, 0});
      out.grid_cols = refined[0] / s;
      out.grid_rows = refined[1] / s;
      for (int32_t y = 0; y < refined[1]; y += s) {
        for (int32_t x = 0; x < refined[0]; x += s) {
          AppendTile(c, Crop(View(fitted), x, y, s, s), &out.pixels);
          ++out.n_tiles;
        }
      }
    }
    AppendTile(c, Resize(image, s, s, o.overview_algo), &out.pixels);
    ++out.n_tiles;
    out.has_global = out.n_tiles > 1;
    return out;
  }
  if (c.projector == ProjectorType::kGemma3) {
    // llama.cpp's fixed-size preprocessor for Gemma 3: bilinear, aspect kept, black letterbox.
    AppendTile(c, ResizeWithPadding(image, s, s, ResizeAlgo::kBilinear, {0, 0, 0}), &out.pixels);
    out.n_tiles = 1;
    return out;
  }
  if (c.projector == ProjectorType::kMlp) {
    const RgbImage tile = o.pad_fixed ? ResizeWithPadding(image, s, s, o.algo, {122, 116, 104})
                                      : Resize(image, s, s, o.algo);
    AppendTile(c, tile, &out.pixels);
    out.n_tiles = 1;
    return out;
  }
  if (c.projector != ProjectorType::kIdefics3) {  // a family added without its preprocessing
    return InternalError("no preprocessing for projector " + c.projector_name);
  }
  int32_t rw = 0, rh = 0;
  Idefics3RefinedSize(image.width, image.height, s, c.preproc_image_size, &rw, &rh);
  if (rw < s || rh < s) return InvalidArgumentError("image too small to tile");
  const RgbImage refined = o.pad_refined ? ResizeWithPadding(image, rw, rh, o.refine_algo, {0, 0, 0})
                                         : Resize(image, rw, rh, o.refine_algo);
  out.grid_cols = rw / s;
  out.grid_rows = rh / s;
  for (int32_t y = 0; y < rh; y += s) {
    for (int32_t x = 0; x < rw; x += s) {
      AppendTile(c, Crop(View(refined), x, y, s, s), &out.pixels);
      ++out.n_tiles;
    }
  }
  AppendTile(c, Resize(image, s, s, o.overview_algo), &out.pixels);
  ++out.n_tiles;
  out.has_global = true;
  return out;
}

}  // namespace vlmd::engine::models
