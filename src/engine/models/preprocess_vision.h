// Image -> normalized encoder tiles, per projector, as llama.cpp's mtmd preprocessors do it:
//  - mlp (LLaVA, fixed size): fit into image_size x image_size preserving the aspect ratio
//    (bicubic), pad with LLaVA's mean color (122, 116, 104), one tile;
//  - idefics3: the refined size scales the longest edge to preproc_image_size and rounds both
//    sides up to multiples of image_size; the image is fitted into it preserving the aspect ratio
//    (bicubic) and padded black (llama.cpp's resize with padding, matched by the fixtures), cut
//    into row-major tiles, then a global image: the original stretched to image_size x
//    image_size with the corner-aligned bilinear filter (llama.cpp's "overview" resize, no
//    padding). Tiles come first, the global image last (the prompt's chunk order);
//  - mlp with grid pinpoints (LLaVA-1.6, "anyres"), and InternVL with its tile grids (llama.cpp
//    runs both through the same slicer): an image larger than image_size on a side is
//    fitted (bicubic, aspect preserved, padded black) into the pinpoint resolution that keeps the
//    most of its pixels and wastes the least (SelectBestResolution), cut into image_size slices
//    row-major, then an overview: the image stretched to image_size (bilinear, no padding),
//    last. A smaller image is the overview alone;
//  - Gemma 3 (fixed size): fit into image_size x image_size preserving the aspect ratio
//    (bilinear), padded black, one tile;
//  - Qwen VL (dynamic resolution): one image whose sides are rounded to multiples of
//    patch_size * 2 within the family's token limits (QwenResizedSize); a different size is
//    reached by an aspect-preserving bilinear resize, padded black (llama.cpp's PAD_CEIL).
// Pure functions: no state, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/models/preprocess_resize.h"
#include "engine/models/vision_config.h"

namespace vlmd::engine::models {

struct PreprocessedImage {
  int32_t tile_size = 0;    // pixels per side of every tile (= config.image_size; Qwen VL: 0)
  // Pixels of each tile: tile_size x tile_size, except Qwen VL's one dynamic-size image.
  int32_t width = 0;
  int32_t height = 0;
  int32_t grid_cols = 0;    // tiles per row (0 when the image is not tiled; Qwen VL: merged tokens)
  int32_t grid_rows = 0;
  bool has_global = false;  // the last tile is the whole image downscaled (idefics3, anyres)
  int64_t n_tiles = 0;
  // n_tiles planar tiles [3][height][width], (pixel / 255 - mean[c]) / std[c].
  std::vector<float> pixels;
};

// Resampling choices; the defaults are llama.cpp's for the projector (tests vary them).
struct PreprocessOptions {
  ResizeAlgo algo = ResizeAlgo::kBicubic;           // fixed-size (mlp)
  ResizeAlgo refine_algo = ResizeAlgo::kBicubic;    // idefics3 refined image (tiles)
  ResizeAlgo overview_algo = ResizeAlgo::kBilinear;  // idefics3 global image
  bool pad_fixed = true;    // mlp: preserve the aspect ratio and pad
  bool pad_refined = true;  // idefics3: preserve the aspect ratio, pad the refined image black
  // anyres: only pinpoints of at most this many slices (token budgets; 0: every pinpoint; < 0:
  // none). When none is left the image is its overview alone.
  int32_t max_slices = 0;
};

// INVALID_ARGUMENT for an empty image or an rgb size that is not width * height * 3.
// qwen_max_tokens: Qwen VL only, a lower token limit than the config's (token budgets; < 1: the
// config's).
Result<PreprocessedImage> PreprocessImage(const VisionConfig& config, RgbView image,
                                          const PreprocessOptions& options = {},
                                          int32_t qwen_max_tokens = 0);

// The size a Qwen VL image of width x height is resized to (llama.cpp's smart resize,
// calc_size_preserved_ratio in float32): each side rounded to a multiple of align = patch_size *
// spatial_merge (at least align); then, over max_tokens merged tokens, scaled down (floor), under
// min_tokens, scaled up (ceil); an extreme aspect ratio that still exceeds max_tokens has its
// long side cut to the limit. max_tokens < 1: the config's. The merged grid is out / align.
void QwenResizedSize(const VisionConfig& config, int32_t width, int32_t height, int32_t max_tokens,
                     int32_t* out_width, int32_t* out_height);

// The pinpoint an anyres image of width x height is fitted to (llama.cpp's select_best_resolution):
// the one whose aspect-preserving fit keeps the most of the image's pixels, ties broken by the
// least padding; the first of equals. Pinpoints over max_slices slices of `slice` pixels are
// skipped (0: none skipped; < 0: all). {0, 0} when none is left.
std::array<int32_t, 2> SelectBestResolution(int32_t width, int32_t height,
                                            const std::vector<std::array<int32_t, 2>>& pinpoints,
                                            int32_t slice, int32_t max_slices);

// The refined size of an idefics3 image: longest edge scaled to `longest_edge` (float math as
// llama.cpp), each side then rounded up to a multiple of `align`.
void Idefics3RefinedSize(int32_t width, int32_t height, int32_t align, int32_t longest_edge,
                         int32_t* out_width, int32_t* out_height);

}  // namespace vlmd::engine::models
