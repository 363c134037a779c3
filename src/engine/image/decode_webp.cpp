// WebP decoding with libwebp (lossy and lossless; animated files are not supported). Alpha is
// composited on white.
#include <string>

#include <webp/decode.h>

#include "engine/image/decoders.h"

namespace vlmd::engine::image::internal {

namespace {

const char* WebpStatusName(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated data";
    default: return "error";
  }
}

}  // namespace

Result<Image> DecodeWebp(std::span<const uint8_t> b, const DecodeLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode fs = WebPGetFeatures(b.data(), b.size(), &features);
  if (fs != VP8_STATUS_OK) return DataLossError(std::string("webp: ") + WebpStatusName(fs));
  // The RGB output, the RGBA staging of an image with alpha, and libwebp's own buffer: a
  // lossless image's ARGB pixels (4 bytes a pixel), a lossy one's alpha plane (1).
  if (features.has_animation) return UnimplementedError("webp: animated images are not supported");
  const uint64_t per_pixel = 3 + (features.has_alpha ? 4 : 0) + (features.format == 1 ? 1 : 4);
  VLMD_RETURN_IF_ERROR(CheckDimensions("webp", features.width, features.height, limits, per_pixel));

  const size_t n = static_cast<size_t>(features.width) * features.height;
  Image img;
  AllocateRgb(features.width, features.height, &img);
  if (!features.has_alpha) {
    if (WebPDecodeRGBInto(b.data(), b.size(), img.rgb.data(), img.rgb.size(),
                          features.width * 3) == nullptr) {
      return DataLossError("webp: corrupt or truncated data");
    }
    return img;
  }
  std::vector<uint8_t> rgba(n * 4);
  if (WebPDecodeRGBAInto(b.data(), b.size(), rgba.data(), rgba.size(), features.width * 4) ==
      nullptr) {
    return DataLossError("webp: corrupt or truncated data");
  }
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) img.rgb[3 * i + c] = OverWhite(rgba[4 * i + c], rgba[4 * i + 3]);
  }
  return img;
}

}  // namespace vlmd::engine::image::internal
