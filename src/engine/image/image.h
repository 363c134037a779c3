// Decoding of request images (JPEG, PNG, WebP, BMP, PPM/PGM) into 8-bit RGB, with size limits
// checked before any pixel allocation, and the content keys used by the embedding cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlmd::engine::image {

// 8-bit RGB, row-major, no row padding: rgb.size() == width * height * 3.
struct Image {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> rgb;
  // The decode budget's hold on these pixels (DecodeLimits::budget; what the decoder needed at
  // its peak while it ran, the RGB bytes after), released with the image; empty without a budget.
  std::shared_ptr<const void> budget_hold{};
  uint64_t budget_bytes = 0;  // the bytes it holds
};

class DecodeBudget;  // decode_budget.h
class DecodeHold;

struct ImageSize {
  int32_t width = 0;
  int32_t height = 0;
};

struct DecodeLimits {
  uint64_t max_bytes = 32ull << 20;   // encoded size, bytes
  uint64_t max_pixels = 50'000'000;   // width * height of the decoded image
  // Decoded bytes in flight across callers (decode_budget.h); nullptr: unbounded.
  std::shared_ptr<DecodeBudget> budget{};
  // Bytes of that budget the caller already holds (the earlier images of one request): an image
  // that cannot fit beside them is refused at once instead of waiting for them.
  uint64_t budget_held = 0;
  // Whether the caller can use an image of `full` (shown) size decoded at `reduced`, e.g. the
  // model's preprocessing then plans the same target size and tiles from it and has pixels
  // enough: JPEG then decodes at the smallest DCT scale (1/8, 1/4, 1/2) so accepted, in less
  // time and memory. Empty: full size.
  std::function<bool(ImageSize full, ImageSize reduced)> accept_reduced{};
  // Internal to DecodeImage: the decode's hold on the budget (internal::ReserveDecodeBytes).
  std::shared_ptr<DecodeHold>* reservation = nullptr;
};

enum class ImageFormat : uint8_t { kUnknown, kJpeg, kPng, kWebp, kBmp, kPnm };

// Sniffs the format from the leading magic bytes only (kUnknown if none match).
ImageFormat SniffFormat(std::span<const uint8_t> bytes);

// Decodes `bytes` (not retained) into RGB. Alpha is composited on white; grayscale is expanded;
// JPEG EXIF orientation (1-8) is applied. Failure results:
//   OUT_OF_RANGE   encoded size over limits.max_bytes, or header dimensions whose product exceeds
//                  limits.max_pixels (checked before pixels are allocated or decoded), or
//                  pixels that exceed the whole decode budget;
//   UNAVAILABLE    the decode budget stayed full for its whole wait;
//   UNIMPLEMENTED  "unsupported image format" (unknown magic) or an unsupported variant
//                  (e.g. animated WebP, palette BMP);
//   DATA_LOSS      truncated or corrupt data; the message names the format and the problem.
// Never aborts or exits on hostile input (libjpeg/libpng errors are caught with longjmp).
Result<Image> DecodeImage(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

// Identity of the decoded content: lowercase hex SHA-256 over width and height (uint32
// little-endian each) followed by the RGB pixels. Two encodings of the same pixels share a key.
std::string ImageKey(const Image& image);

// Lowercase hex SHA-256 of the encoded bytes, for allowlists of exact files.
std::string EncodedSha256(std::span<const uint8_t> bytes);

}  // namespace vlmd::engine::image
