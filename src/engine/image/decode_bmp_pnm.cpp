// Hand-written, bounds-checked decoders for uncompressed BMP (24/32-bit) and binary PPM/PGM.
#include <cstring>
#include <string>

#include "engine/image/decoders.h"

namespace vlmd::engine::image::internal {

namespace {

uint32_t ReadU32Le(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint16_t ReadU16Le(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

Result<Image> DecodeBmp(std::span<const uint8_t> b, const DecodeLimits& limits) {
  // BITMAPFILEHEADER (14 bytes) + at least BITMAPINFOHEADER (40 bytes).
  if (b.size() < 14 + 40) return DataLossError("bmp: truncated header");
  const uint32_t pixel_offset = ReadU32Le(&b[10]);
  const uint32_t dib_size = ReadU32Le(&b[14]);
  if (dib_size < 40 || dib_size > 1024) {
    return dib_size == 12 ? UnimplementedError("bmp: OS/2 core header is not supported")
                          : DataLossError("bmp: invalid info header size " +
                                          std::to_string(dib_size));
  }
  const int32_t width = static_cast<int32_t>(ReadU32Le(&b[18]));
  const int32_t raw_height = static_cast<int32_t>(ReadU32Le(&b[22]));
  const uint16_t bpp = ReadU16Le(&b[28]);
  const uint32_t compression = ReadU32Le(&b[30]);
  if (raw_height == INT32_MIN) return DataLossError("bmp: invalid height");
  const bool top_down = raw_height < 0;
  const int32_t height = top_down ? -raw_height : raw_height;
  VLMD_RETURN_IF_ERROR(CheckDimensions("bmp", width, height, limits, /*bytes_per_pixel=*/3));  // RGB
  if (compression != 0 || (bpp != 24 && bpp != 32)) {
    return UnimplementedError("bmp: only uncompressed 24/32-bit is supported (bpp " +
                              std::to_string(bpp) + ", compression " +
                              std::to_string(compression) + ")");
  }
  const uint64_t stride = (static_cast<uint64_t>(width) * bpp + 31) / 32 * 4;
  const uint64_t needed = static_cast<uint64_t>(pixel_offset) + stride * height;
  if (pixel_offset < 14 + dib_size || needed > b.size()) {
    return DataLossError("bmp: truncated pixel data (need " + std::to_string(needed) +
                         " bytes, have " + std::to_string(b.size()) + ")");
  }
  Image img;
  AllocateRgb(width, height, &img);
  const int bytes_pp = bpp / 8;
  for (int32_t y = 0; y < height; ++y) {
    const int32_t src_row = top_down ? y : height - 1 - y;
    const uint8_t* src = b.data() + pixel_offset + stride * src_row;
    uint8_t* dst = img.rgb.data() + static_cast<size_t>(y) * width * 3;
    for (int32_t x = 0; x < width; ++x, src += bytes_pp, dst += 3) {
      dst[0] = src[2];  // stored as BGR(X)
      dst[1] = src[1];
      dst[2] = src[0];
    }
  }
  return img;
}

namespace {

// Cursor over a PNM header: whitespace and '#' comments separate decimal fields.
class PnmHeader {
 public:
  explicit PnmHeader(std::span<const uint8_t> b) : b_(b), pos_(2) {}

  // Reads one positive decimal field (at most 9 digits, so no overflow). False on EOF/garbage.
  bool Field(uint32_t* value) {
    for (;;) {
      if (pos_ >= b_.size()) return false;
      const uint8_t c = b_[pos_];
      if (c == '#') {
        while (pos_ < b_.size() && b_[pos_] != '\n' && b_[pos_] != '\r') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
        ++pos_;
      } else {
        break;
      }
    }
    uint32_t v = 0;
    int digits = 0;
    while (pos_ < b_.size() && b_[pos_] >= '0' && b_[pos_] <= '9') {
      if (++digits > 9) return false;
      v = v * 10 + (b_[pos_++] - '0');
    }
    if (digits == 0) return false;
    *value = v;
    return true;
  }
  // The header ends with exactly one whitespace byte after maxval.
  bool EndOfHeader() {
    if (pos_ >= b_.size()) return false;
    const uint8_t c = b_[pos_];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
    ++pos_;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_;
};

}  // namespace

Result<Image> DecodePnm(std::span<const uint8_t> b, const DecodeLimits& limits) {
  const bool color = b[1] == '6';
  const char* name = color ? "ppm" : "pgm";
  PnmHeader header(b);
  uint32_t width = 0, height = 0, maxval = 0;
  if (!header.Field(&width) || !header.Field(&height)) {
    return DataLossError(std::string(name) + ": truncated or malformed dimensions");
  }
  VLMD_RETURN_IF_ERROR(CheckDimensions(name, width, height, limits, /*bytes_per_pixel=*/3));  // RGB
  if (!header.Field(&maxval) || !header.EndOfHeader()) {
    return DataLossError(std::string(name) + ": truncated or malformed maxval");
  }
  if (maxval == 0 || maxval > 65535) {
    return DataLossError(std::string(name) + ": invalid maxval " + std::to_string(maxval));
  }
  const int channels = color ? 3 : 1;
  const int sample_bytes = maxval > 255 ? 2 : 1;
  const uint64_t needed = static_cast<uint64_t>(width) * height * channels * sample_bytes;
  if (b.size() - header.pos() < needed) {
    return DataLossError(std::string(name) + ": truncated pixel data (need " +
                         std::to_string(needed) + " bytes, have " +
                         std::to_string(b.size() - header.pos()) + ")");
  }
  Image img;
  AllocateRgb(static_cast<int32_t>(width), static_cast<int32_t>(height), &img);
  const uint8_t* src = b.data() + header.pos();
  const size_t n = static_cast<size_t>(width) * height;
  auto sample = [&](size_t i) -> uint32_t {
    uint32_t v = sample_bytes == 2 ? (src[2 * i] << 8 | src[2 * i + 1]) : src[i];
    if (v > maxval) v = maxval;  // out-of-range samples are clamped, not trusted
    return maxval == 255 ? v : (v * 255 + maxval / 2) / maxval;
  };
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      img.rgb[3 * i + c] = static_cast<uint8_t>(sample(color ? 3 * i + c : i));
    }
  }
  return img;
}

}  // namespace vlmd::engine::image::internal
