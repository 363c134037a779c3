// 8-bit RGB resampling as llama.cpp's mtmd image tools do it (bit-exact targets for parity):
// bilinear, the clip.cpp bicubic, aspect-preserving fit with padding, and crops. Pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace vlmd::engine::models {

// 8-bit RGB, row-major, rgb.size() == width * height * 3.
struct RgbImage {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> rgb;
};

struct RgbView {
  int32_t width = 0;
  int32_t height = 0;
  std::span<const uint8_t> rgb;  // width * height * 3 bytes, not owned
};

enum class ResizeAlgo : uint8_t {
  kBilinear,  // corner-aligned ratios (src - 1) / (dst - 1), truncating to u8 (llama.cpp)
  kBicubic,   // 4x4 cubic convolution of llama.cpp's clip.cpp, rounded and clamped to u8
  // Separable convolution resampling as Pillow's ImagingResample (antialiased when shrinking,
  // 22-bit fixed-point weights), which llama.cpp also implements: cubic a = -0.5 / Lanczos-3.
  kBicubicPillow,
  kLanczos,
  kBilinearPillow,  // triangle filter in the same separable scheme
};

// Resizes `src` to exactly width x height (aspect ratio not preserved). A same-size resize is a
// copy. Preconditions: positive sizes; bilinear needs src at least 2x2 (smaller sources fall
// back to bicubic, which has no such limit).
RgbImage Resize(RgbView src, int32_t width, int32_t height, ResizeAlgo algo);

// Fits `src` into width x height preserving the aspect ratio (the scaled side is rounded up and
// capped), centers it and fills the rest with `pad` (llama.cpp's resize with padding).
RgbImage ResizeWithPadding(RgbView src, int32_t width, int32_t height, ResizeAlgo algo,
                           std::array<uint8_t, 3> pad);

// The w x h block at (x, y). Precondition: the block lies inside src.
RgbImage Crop(RgbView src, int32_t x, int32_t y, int32_t w, int32_t h);

inline RgbView View(const RgbImage& img) { return {img.width, img.height, img.rgb}; }

}  // namespace vlmd::engine::models
