// Per-format decoders behind DecodeImage (image.cpp); internal to the image module.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "engine/image/image.h"

namespace vlmd::engine::image::internal {

// Checks width x height against the limits before any pixel buffer exists, then reserves
// bytes_per_pixel bytes a pixel of the decode budget (ReserveDecodeBytes; 0: check only).
// `format` names the format in messages. Dimensions must be positive (DATA_LOSS otherwise).
Status CheckDimensions(const char* format, int64_t width, int64_t height,
                       const DecodeLimits& limits, uint64_t bytes_per_pixel);

// Makes the decode's reservation (DecodeLimits::budget) `bytes`: what the decoder holds at its
// peak (its RGB output, its staging, the library's own image-sized buffers). A decode may call it
// again with more (the reservation grows by the difference; DecodeImage shrinks it to the
// image's RGB bytes once the decode is done). No budget: OK.
Status ReserveDecodeBytes(const DecodeLimits& limits, uint64_t bytes);

// Allocates out->rgb for width x height (CheckDimensions must have passed).
void AllocateRgb(int32_t width, int32_t height, Image* out);

// Composites one RGBA pixel on white: c*a + 255*(1-a), rounded.
inline uint8_t OverWhite(uint8_t c, uint8_t a) {
  return static_cast<uint8_t>((c * a + 255 * (255 - a) + 127) / 255);
}

// Each decoder assumes SniffFormat matched its magic; `bytes` is within limits.max_bytes.
Result<Image> DecodeJpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Result<Image> DecodePng(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Result<Image> DecodeWebp(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Result<Image> DecodeBmp(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Result<Image> DecodePnm(std::span<const uint8_t> bytes, const DecodeLimits& limits);

// EXIF orientation (1-8) from an APP1 payload starting with "Exif\0\0"; 1 when absent or invalid.
int ExifOrientation(std::span<const uint8_t> app1);
// Applies an EXIF orientation to `image` in place (1 = no-op).
void ApplyOrientation(int orientation, Image* image);

}  // namespace vlmd::engine::image::internal
