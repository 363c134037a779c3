// Reading the vision-encoder hyperparameters from clip.* keys (see vision_config.h).
#include "engine/models/vision_config.h"

#include <algorithm>
#include <cmath>

#include "engine/models/registry.h"

namespace vlmd::engine::models {
namespace {

Result<int32_t> GetPositive(const gguf::GgufFile& f, const std::string& key, int64_t max) {
  VLMD_ASSIGN_OR_RETURN(uint32_t v, f.GetU32(key));
  if (v == 0 || v > max) {
    return InvalidArgumentError("mmproj key " + key + " = " + std::to_string(v) +
                                " is outside [1, " + std::to_string(max) + "]");
  }
  return static_cast<int32_t>(v);
}

Result<bool> GetOptionalBool(const gguf::GgufFile& f, const std::string& key) {
  if (f.Find(key) == nullptr) return false;
  return f.GetBool(key);
}

Result<std::array<float, 3>> GetRgb(const gguf::GgufFile& f, const std::string& key) {
  VLMD_ASSIGN_OR_RETURN(std::vector<float> v, f.GetF32Array(key));
  if (v.size() != 3) {
    return InvalidArgumentError("mmproj key " + key + " has " + std::to_string(v.size()) +
                                " values, expected 3 (R, G, B)");
  }
  return std::array<float, 3>{v[0], v[1], v[2]};
}

// The largest tile side (clip.vision.image_size) a file may set.
constexpr int32_t kMaxTileSide = 2048;

// The largest image a grid may fit an image to (pixels): far above real grids (LLaVA-1.6's
// 1008 x 336, InternVL's 12 tiles of 448), far below what a hostile file could ask for
// (64 slices of a 16384-pixel tile).
constexpr int64_t kMaxGridPixels = int64_t{1} << 26;

Status CheckGrids(const VisionConfig& c, const std::string& key) {
  for (const auto& [w, h] : c.grid_pinpoints) {
    if (int64_t{w} * h > kMaxGridPixels) {
      return InvalidArgumentError(key + ": a " + std::to_string(w) + "x" + std::to_string(h) +
                                  " grid is over " + std::to_string(kMaxGridPixels) + " pixels");
    }
  }
  return Status::Ok();
}

// LLaVA's keys: the anyres grid (LLaVA-1.6) and the blocks the ViT runs.
Status ReadLlavaKeys(const gguf::GgufFile& f, VisionConfig* c) {
  c->n_layers_run = c->n_layers - 1;  // without feature_layer llama.cpp skips the last block
  if (f.Find("clip.vision.feature_layer") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(std::vector<int32_t> layers, f.GetI32Array("clip.vision.feature_layer"));
    if (layers.size() != 1) {
      // Several entries (Granite vision) concatenate the outputs of several blocks.
      return UnimplementedError("clip.vision.feature_layer with " + std::to_string(layers.size()) +
                                " entries (one is supported)");
    }
    if (layers[0] < 1 || layers[0] > c->n_layers) {
      return InvalidArgumentError("clip.vision.feature_layer " + std::to_string(layers[0]) +
                                  " is not a block of the " + std::to_string(c->n_layers) + "-block ViT");
    }
    c->n_layers_run = layers[0];
  }
  if (f.Find("clip.vision.image_grid_pinpoints") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(std::vector<int32_t> pins, f.GetI32Array("clip.vision.image_grid_pinpoints"));
    if (pins.empty() || pins.size() % 2 != 0 || pins.size() > 2 * 64) {
      return InvalidArgumentError("clip.vision.image_grid_pinpoints: expected 1 to 64 (width, height) pairs, got " +
                                  std::to_string(pins.size()) + " values");
    }
    for (size_t i = 0; i < pins.size(); i += 2) {
      const int32_t w = pins[i], h = pins[i + 1];
      if (w <= 0 || h <= 0 || w % c->image_size != 0 || h % c->image_size != 0 ||
          int64_t{w / c->image_size} * (h / c->image_size) > 64) {
        return InvalidArgumentError("clip.vision.image_grid_pinpoints: " + std::to_string(w) + "x" +
                                    std::to_string(h) + " is not a grid of at most 64 " +
                                    std::to_string(c->image_size) + "-pixel slices");
      }
      c->grid_pinpoints.push_back({w, h});
    }
  }
  return CheckGrids(*c, "clip.vision.image_grid_pinpoints");
}

// InternVL's keys: the pixel shuffle and the tile grids (llama.cpp's defaults 2, 1 and 12).
Status ReadInternVlKeys(const gguf::GgufFile& f, VisionConfig* c) {
  c->scale_factor = 2;
  if (f.Find("clip.vision.projector.scale_factor") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(c->scale_factor, GetPositive(f, "clip.vision.projector.scale_factor", 64));
  }
  if (c->patches_per_side() % c->scale_factor != 0) {
    return InvalidArgumentError("internvl: patches per side " + std::to_string(c->patches_per_side()) +
                                " is not a multiple of scale_factor " + std::to_string(c->scale_factor));
  }
  int32_t min_tiles = 1, max_tiles = 12;
  if (f.Find("clip.vision.preproc_min_tiles") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(min_tiles, GetPositive(f, "clip.vision.preproc_min_tiles", 64));
  }
  if (f.Find("clip.vision.preproc_max_tiles") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(max_tiles, GetPositive(f, "clip.vision.preproc_max_tiles", 64));
  }
  if (min_tiles > max_tiles) {
    return InvalidArgumentError("internvl: preproc_min_tiles " + std::to_string(min_tiles) +
                                " > preproc_max_tiles " + std::to_string(max_tiles));
  }
  c->grid_pinpoints = InternVlGrids(c->image_size, min_tiles, max_tiles);
  if (c->grid_pinpoints.empty()) {  // e.g. min 3, max 4: no a x b grid has 3 <= a, b and ab <= 4
    return InvalidArgumentError("internvl: no tile grid has between preproc_min_tiles " +
                                std::to_string(min_tiles) + " and preproc_max_tiles " +
                                std::to_string(max_tiles) + " tiles");
  }
  return CheckGrids(*c, "internvl: clip.vision.preproc_max_tiles");
}

// What the tensors say where llama.cpp's converters write keys that disagree with them
// (llama.cpp takes these from the tensors too; the parity fixtures' writer keeps them equal):
//  - the FFN: older conversions of CLIP-style towers (the legacy LLaVA script, the Gemma 3,
//    SmolVLM and Qwen2-VL files of early 2025) named fc1 "ffn_down" and fc2 "ffn_up". llama.cpp
//    (clip.cpp, load_tensors) swaps them back for these projectors when ffn_down reads the
//    model's width; vlmd does the same (VisionConfig::ffn_swapped);
//  - the FFN width: the current converter writes Qwen2-VL's merger width (1536 for 2B) as
//    clip.vision.feed_forward_length, where the blocks' FFN is 5120 wide: the width is fc1's;
//  - the LLaVA projector's output: the legacy script writes CLIP's own projection_dim (768) where
//    mm.2 outputs the text model's width (4096): the width is mm.2's (the engine checks it
//    against the text model).
void ResolveFromTensors(const gguf::GgufFile& f, VisionConfig* c) {
  const bool swap_rule = c->projector == ProjectorType::kMlp ||
                         c->projector == ProjectorType::kQwen2vl ||
                         c->projector == ProjectorType::kQwen25vl ||
                         c->projector == ProjectorType::kGemma3 ||
                         c->projector == ProjectorType::kIdefics3;
  const gguf::TensorInfo* up = f.FindTensor("v.blk.0.ffn_up.weight");
  const gguf::TensorInfo* down = f.FindTensor("v.blk.0.ffn_down.weight");
  if (up != nullptr && down != nullptr && up->n_dims == 2 && down->n_dims == 2) {
    c->ffn_swapped = swap_rule && down->ne[0] == c->d_model;
    const gguf::TensorInfo* fc1 = c->ffn_swapped ? down : up;
    if (fc1->ne[0] == c->d_model && fc1->ne[1] > 0 && fc1->ne[1] <= (1 << 20)) {
      c->d_ff = static_cast<int32_t>(fc1->ne[1]);
    }
  }
  if (c->projector == ProjectorType::kMlp) {
    const gguf::TensorInfo* mm2 = f.FindTensor("mm.2.weight");
    if (mm2 != nullptr && mm2->n_dims == 2 && mm2->ne[1] > 0 && mm2->ne[1] <= (1 << 16)) {
      c->projection_dim = static_cast<int32_t>(mm2->ne[1]);
    }
  }
}

}  // namespace

std::vector<std::array<int32_t, 2>> InternVlGrids(int32_t side, int32_t min_tiles, int32_t max_tiles) {
  std::vector<std::array<int32_t, 2>> grids;
  for (int32_t a = min_tiles; a <= max_tiles; ++a) {
    const int32_t b_lo = std::max((min_tiles + a - 1) / a, min_tiles);
    const int32_t b_hi = std::min(max_tiles / a, max_tiles);
    for (int32_t b = b_lo; b <= b_hi; ++b) grids.push_back({a * side, b * side});
  }
  return grids;
}

Result<VisionConfig> ReadVisionConfig(const gguf::GgufFile& f) {
  VisionConfig c;
  VLMD_ASSIGN_OR_RETURN(std::string_view arch, f.GetString("general.architecture"));
  if (arch != "clip") {
    return InvalidArgumentError("mmproj general.architecture is '" + std::string(arch) +
                                "', expected 'clip'");
  }
  if (f.Find("clip.has_vision_encoder") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(bool has_vision, f.GetBool("clip.has_vision_encoder"));
    if (!has_vision) return UnimplementedError("mmproj has no vision encoder");
  }
  VLMD_ASSIGN_OR_RETURN(std::string_view proj, f.GetString("clip.projector_type"));
  c.projector_name = std::string(proj);
  const VisionFamily* family = FindVisionFamily(proj);
  if (family == nullptr) {
    return UnimplementedError("vision projector type '" + c.projector_name +
                              "' is not supported (supported: " + SupportedProjectors() + ")");
  }
  c.projector = family->type;
  constexpr int64_t kMaxDim = 1 << 16;
  // One tile is image_size^2 pixels whatever the image (its floats and its unfolded patches are
  // allocated per image): real towers use 224 to 1024 (Qwen VL's nominal 560 included); 2048 keeps
  // a hostile file with huge patches (a small file) from asking gigabytes per image.
  VLMD_ASSIGN_OR_RETURN(c.image_size, GetPositive(f, "clip.vision.image_size", kMaxTileSide));
  VLMD_ASSIGN_OR_RETURN(c.patch_size, GetPositive(f, "clip.vision.patch_size", 1 << 10));
  VLMD_ASSIGN_OR_RETURN(c.d_model, GetPositive(f, "clip.vision.embedding_length", kMaxDim));
  VLMD_ASSIGN_OR_RETURN(c.d_ff, GetPositive(f, "clip.vision.feed_forward_length", 1 << 20));
  VLMD_ASSIGN_OR_RETURN(c.n_layers, GetPositive(f, "clip.vision.block_count", 1024));
  VLMD_ASSIGN_OR_RETURN(c.n_heads, GetPositive(f, "clip.vision.attention.head_count", 1024));
  VLMD_ASSIGN_OR_RETURN(c.projection_dim, GetPositive(f, "clip.vision.projection_dim", kMaxDim));
  VLMD_ASSIGN_OR_RETURN(c.eps, f.GetF32("clip.vision.attention.layer_norm_epsilon"));
  if (!(c.eps > 0.0f) || !std::isfinite(c.eps)) {
    return InvalidArgumentError("clip.vision.attention.layer_norm_epsilon must be > 0");
  }
  if (c.image_size % c.patch_size != 0) {
    return InvalidArgumentError("clip.vision.image_size " + std::to_string(c.image_size) +
                                " is not a multiple of patch_size " +
                                std::to_string(c.patch_size));
  }
  if (c.d_model % c.n_heads != 0) {
    return InvalidArgumentError("clip.vision.embedding_length is not a multiple of head_count");
  }
  c.head_dim = c.d_model / c.n_heads;
  VLMD_ASSIGN_OR_RETURN(c.image_mean, GetRgb(f, "clip.vision.image_mean"));
  VLMD_ASSIGN_OR_RETURN(c.image_std, GetRgb(f, "clip.vision.image_std"));
  for (float s : c.image_std) {
    if (!(s > 0.0f) || !std::isfinite(s)) {
      return InvalidArgumentError("clip.vision.image_std must be finite and > 0");
    }
  }
  for (float m : c.image_mean) {
    if (!std::isfinite(m)) return InvalidArgumentError("clip.vision.image_mean must be finite");
  }
  VLMD_ASSIGN_OR_RETURN(bool use_gelu, GetOptionalBool(f, "clip.use_gelu"));
  VLMD_ASSIGN_OR_RETURN(bool use_silu, GetOptionalBool(f, "clip.use_silu"));
  if (use_silu && !family->silu_ffn) {
    return UnimplementedError("clip.use_silu (SiLU vision FFN) is not supported for " +
                              c.projector_name);
  }
  c.ffn_act = use_silu   ? ops::Activation::kSilu
              : use_gelu ? ops::Activation::kGeluTanh
                         : ops::Activation::kGeluQuick;
  if (IsQwenVl(c.projector)) {
    if (f.Find("clip.vision.spatial_merge_size") != nullptr) {
      VLMD_ASSIGN_OR_RETURN(c.spatial_merge, GetPositive(f, "clip.vision.spatial_merge_size", 8));
    }
    if (c.spatial_merge != 2) {
      return UnimplementedError("clip.vision.spatial_merge_size " + std::to_string(c.spatial_merge) +
                                " (the Qwen VL merger is 2x2)");
    }
    if (c.head_dim % 4 != 0) {
      return InvalidArgumentError("qwen vision: head dim " + std::to_string(c.head_dim) +
                                  " is not a multiple of 4 (2-D RoPE sections)");
    }
    // An image is resized to at most max_tokens merged units of (patch * merge)^2 pixels (the
    // tile size does not apply), and a thin one is padded up to one unit across: huge patches
    // (a small file) would make even a 1x1 image gigabytes of pixels and patches.
    const int64_t unit_side = int64_t{c.patch_size} * c.spatial_merge;
    if (unit_side * unit_side * c.max_tokens > kMaxGridPixels) {
      return InvalidArgumentError(
          "qwen vision: clip.vision.patch_size " + std::to_string(c.patch_size) + " makes images of " +
          std::to_string(c.max_tokens) + " tokens over " + std::to_string(kMaxGridPixels) +
          " pixels (real files: 14 or 16)");
    }
    if (c.projector == ProjectorType::kQwen25vl) {
      // Required: llama.cpp refuses a qwen2.5vl_merger file without it.
      VLMD_ASSIGN_OR_RETURN(c.n_wa_pattern, GetPositive(f, "clip.vision.n_wa_pattern", 1024));
    }
  }
  ResolveFromTensors(f, &c);
  c.n_layers_run = c.n_layers;
  if (c.projector == ProjectorType::kMlp) {
    VLMD_RETURN_IF_ERROR(ReadLlavaKeys(f, &c));
  }
  if (c.projector == ProjectorType::kInternvl) {
    VLMD_RETURN_IF_ERROR(ReadInternVlKeys(f, &c));
  }
  if (c.projector == ProjectorType::kGemma3) {
    c.scale_factor = 4;  // the pooling kernel (llama.cpp's default; real files do not write it)
    if (f.Find("clip.vision.projector.scale_factor") != nullptr) {
      VLMD_ASSIGN_OR_RETURN(c.scale_factor, GetPositive(f, "clip.vision.projector.scale_factor", 64));
    }
    if (c.patches_per_side() % c.scale_factor != 0) {
      return InvalidArgumentError("gemma3: patches per side " + std::to_string(c.patches_per_side()) +
                                  " is not a multiple of the pooling kernel " + std::to_string(c.scale_factor));
    }
  }
  if (c.projector == ProjectorType::kIdefics3) {
    VLMD_ASSIGN_OR_RETURN(c.scale_factor,
                          GetPositive(f, "clip.vision.projector.scale_factor", 64));
    if (c.patches_per_side() % c.scale_factor != 0) {
      return InvalidArgumentError("idefics3: patches per side " +
                                  std::to_string(c.patches_per_side()) +
                                  " is not a multiple of scale_factor " +
                                  std::to_string(c.scale_factor));
    }
    c.preproc_image_size = c.image_size;
    if (f.Find("clip.vision.preproc_image_size") != nullptr) {
      VLMD_ASSIGN_OR_RETURN(c.preproc_image_size,
                            GetPositive(f, "clip.vision.preproc_image_size", 1 << 15));
    }
    // Every image is refined up to this longest edge, rounded up to whole tiles, and cut into
    // tiles: at most 64 of them (as LLaVA-1.6's and InternVL's grids; SmolVLM: 2048 = 4 x 512,
    // 16 tiles), and a grid within what any grid may be. Without the first bound, 8-pixel tiles
    // of an 8192-pixel edge were a million tiles (and a thousand shrink levels) per image.
    const int64_t tiles_per_side =
        (int64_t{c.preproc_image_size} + c.image_size - 1) / c.image_size;
    const int64_t grid_side = tiles_per_side * c.image_size;
    if (tiles_per_side * tiles_per_side > 64 || grid_side * grid_side > kMaxGridPixels) {
      return InvalidArgumentError(
          "clip.vision.preproc_image_size " + std::to_string(c.preproc_image_size) + " makes grids of " +
          std::to_string(tiles_per_side) + " x " + std::to_string(tiles_per_side) + " " +
          std::to_string(c.image_size) + "-pixel tiles (at most 64 tiles and " +
          std::to_string(kMaxGridPixels) + " pixels)");
    }
  }
  return c;
}

}  // namespace vlmd::engine::models
