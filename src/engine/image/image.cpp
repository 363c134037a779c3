// Format sniffing, limits and dispatch for DecodeImage; content keys (SHA-256).
#include "engine/image/image.h"

#include <cstring>
#include <string>

#include "core/sha256.h"
#include "engine/image/decode_budget.h"
#include "engine/image/decoders.h"

namespace vlmd::engine::image {

namespace internal {

Status CheckDimensions(const char* format, int64_t width, int64_t height,
                       const DecodeLimits& limits, uint64_t bytes_per_pixel) {
  if (width <= 0 || height <= 0) {
    return DataLossError(std::string(format) + ": invalid dimensions " + std::to_string(width) +
                         "x" + std::to_string(height));
  }
  // Both factors are below 2^32 for every format we read, so the product fits in uint64; the
  // explicit guard keeps this true for any caller.
  const uint64_t w = static_cast<uint64_t>(width), h = static_cast<uint64_t>(height);
  if (w > (1ull << 31) || h > (1ull << 31) || w * h > limits.max_pixels) {
    return OutOfRangeError(std::string(format) + ": image " + std::to_string(width) + "x" +
                           std::to_string(height) + " exceeds the limit of " +
                           std::to_string(limits.max_pixels) +
                           " pixels (possible decompression bomb)");
  }
  // max_pixels is far below 2^58, so the product with a small per-pixel count fits.
  return ReserveDecodeBytes(limits, w * h * bytes_per_pixel);
}

Status ReserveDecodeBytes(const DecodeLimits& limits, uint64_t bytes) {
  if (limits.budget == nullptr || limits.reservation == nullptr || bytes == 0) return Status::Ok();
  if (*limits.reservation == nullptr) {
    VLMD_ASSIGN_OR_RETURN(*limits.reservation, limits.budget->Reserve(bytes, limits.budget_held));
    return Status::Ok();
  }
  return (*limits.reservation)->GrowTo(bytes, limits.budget_held);
}

void AllocateRgb(int32_t width, int32_t height, Image* out) {
  out->width = width;
  out->height = height;
  out->rgb.assign(static_cast<size_t>(width) * static_cast<size_t>(height) * 3, 0);
}

}  // namespace internal

ImageFormat SniffFormat(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("\xFF\xD8\xFF", 3)) return ImageFormat::kJpeg;
  if (starts("\x89PNG\r\n\x1A\n", 8)) return ImageFormat::kPng;
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return ImageFormat::kWebp;
  if (starts("BM", 2)) return ImageFormat::kBmp;
  if (starts("P6", 2) || starts("P5", 2)) return ImageFormat::kPnm;
  return ImageFormat::kUnknown;
}

Result<Image> DecodeImage(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.size() > limits.max_bytes) {
    return OutOfRangeError("image: encoded size " + std::to_string(bytes.size()) +
                           " bytes exceeds the limit of " + std::to_string(limits.max_bytes));
  }
  std::shared_ptr<DecodeHold> reservation;  // the decode budget's, once the header is read
  DecodeLimits with_hold = limits;
  with_hold.reservation = &reservation;
  Result<Image> image = UnimplementedError("unsupported image format");
  switch (SniffFormat(bytes)) {
    case ImageFormat::kJpeg: image = internal::DecodeJpeg(bytes, with_hold); break;
    case ImageFormat::kPng: image = internal::DecodePng(bytes, with_hold); break;
    case ImageFormat::kWebp: image = internal::DecodeWebp(bytes, with_hold); break;
    case ImageFormat::kBmp: image = internal::DecodeBmp(bytes, with_hold); break;
    case ImageFormat::kPnm: image = internal::DecodePnm(bytes, with_hold); break;
    case ImageFormat::kUnknown: break;
  }
  if (image.ok() && reservation != nullptr) {
    // The decoder's staging is gone: the image keeps only its RGB bytes held.
    reservation->ShrinkTo(image->rgb.size());
    image->budget_bytes = reservation->bytes();
    image->budget_hold = std::move(reservation);
  }
  return image;
}

std::string ImageKey(const Image& image) {
  uint8_t dims[8];
  const uint32_t w = static_cast<uint32_t>(image.width), h = static_cast<uint32_t>(image.height);
  for (int i = 0; i < 4; ++i) {
    dims[i] = static_cast<uint8_t>(w >> (8 * i));
    dims[4 + i] = static_cast<uint8_t>(h >> (8 * i));
  }
  Sha256 sha;
  sha.Update(dims);
  sha.Update(image.rgb);
  return DigestHex(sha.Finish());
}

std::string EncodedSha256(std::span<const uint8_t> bytes) { return DigestHex(Sha256Of(bytes)); }

}  // namespace vlmd::engine::image
