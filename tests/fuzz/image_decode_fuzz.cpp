// libFuzzer target: DecodeImage on arbitrary bytes with small limits (so that no input can make
// a legitimately huge allocation), checking the result's invariants; also the EXIF IFD parser.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/image/decoders.h"
#include "engine/image/image.h"

namespace {

namespace img = vlmd::engine::image;

volatile uint64_t g_sink;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  img::DecodeLimits limits;
  limits.max_bytes = 1 << 16;
  limits.max_pixels = 1 << 18;
  vlmd::Result<img::Image> r = img::DecodeImage(bytes, limits);
  if (r.ok()) {
    const img::Image& im = *r;
    if (im.width <= 0 || im.height <= 0) __builtin_trap();
    if (static_cast<uint64_t>(im.width) * im.height > limits.max_pixels) __builtin_trap();
    if (im.rgb.size() != static_cast<size_t>(im.width) * im.height * 3) __builtin_trap();
    g_sink = g_sink + im.rgb.front() + im.rgb.back();
  } else if (r.status().code() != vlmd::StatusCode::kDataLoss &&
             r.status().code() != vlmd::StatusCode::kUnimplemented &&
             r.status().code() != vlmd::StatusCode::kOutOfRange) {
    __builtin_trap();  // hostile data maps to these three codes only
  }
  // The hand-written EXIF parser sees the raw input as an APP1 payload too.
  const int orientation = img::internal::ExifOrientation(bytes);
  if (orientation < 1 || orientation > 8) __builtin_trap();
  return 0;
}
