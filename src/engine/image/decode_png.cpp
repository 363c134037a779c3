// PNG decoding with libpng: every color type and bit depth to 8-bit RGB, alpha (including tRNS)
// composited on white. libpng errors longjmp back here; warnings are dropped.
#include <csetjmp>
#include <cstring>
#include <string>

#include <png.h>

#include "engine/image/decoders.h"

namespace vlmd::engine::image::internal {

namespace {

struct PngSource {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  char message[256] = "";
};

void ReadFn(png_structp png, png_bytep data, size_t length) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > src->bytes.size() - src->pos) png_error(png, "unexpected end of data");
  std::memcpy(data, src->bytes.data() + src->pos, length);
  src->pos += length;
}

void ErrorFn(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof(src->message), "%s", message);
  png_longjmp(png, 1);
}

void WarningFn(png_structp, png_const_charp) {}

// Buffers with destructors live here, in the caller's frame, so that a longjmp inside libpng
// never skips a destructor.
struct PngBuffers {
  std::vector<uint8_t> pixels;   // rows of `channels` bytes per pixel
  std::vector<png_bytep> rows;
};

bool DecodeWithLibpng(PngSource* src, const DecodeLimits& limits, PngBuffers* buf, Image* out,
                      Status* status) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, ErrorFn, WarningFn);
  if (png == nullptr) {
    *status = ResourceExhaustedError("png: cannot create decoder");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    *status = ResourceExhaustedError("png: cannot create decoder");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    *status = DataLossError(std::string("png: ") + src->message);
    return false;
  }
  png_set_read_fn(png, src, ReadFn);
  // Ancillary chunks (iCCP, zTXt, ...) are capped so that they cannot be bombs of their own.
  png_set_chunk_malloc_max(png, 8 << 20);
  png_set_chunk_cache_max(png, 256);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  {  // scoped: no object with a destructor may be alive when libpng longjmps later
    // The RGB output and the staging rows libpng writes (3 or 4 bytes a pixel after the
    // transforms below: 4 with an alpha channel or a tRNS chunk).
    const bool alpha = (png_get_color_type(png, info) & PNG_COLOR_MASK_ALPHA) != 0 ||
                       png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    Status dims = CheckDimensions("png", width, height, limits, 3 + (alpha ? 4 : 3));
    if (!dims.ok()) {
      png_destroy_read_struct(&png, &info, nullptr);
      *status = dims;
      return false;
    }
  }
  png_set_expand(png);          // palette -> RGB, gray < 8 bit -> 8 bit, tRNS -> alpha
  png_set_strip_16(png);        // 16 -> 8 bit: the high byte, as llama.cpp (stb) and PIL keep
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);  // 3 or 4 after the transforms
  const size_t row_bytes = png_get_rowbytes(png, info);
  if ((channels != 3 && channels != 4) || row_bytes != static_cast<size_t>(width) * channels) {
    png_error(png, "unexpected layout after transforms");
  }
  buf->pixels.resize(row_bytes * height);
  buf->rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) buf->rows[y] = buf->pixels.data() + y * row_bytes;
  png_read_image(png, buf->rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);

  AllocateRgb(static_cast<int32_t>(width), static_cast<int32_t>(height), out);
  const size_t n = static_cast<size_t>(width) * height;
  if (channels == 3) {
    std::memcpy(out->rgb.data(), buf->pixels.data(), n * 3);
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &buf->pixels[4 * i];
      for (int c = 0; c < 3; ++c) out->rgb[3 * i + c] = OverWhite(p[c], p[3]);
    }
  }
  return true;
}

}  // namespace

Result<Image> DecodePng(std::span<const uint8_t> b, const DecodeLimits& limits) {
  PngSource src;
  src.bytes = b;
  PngBuffers buf;
  Image img;
  Status status;
  if (!DecodeWithLibpng(&src, limits, &buf, &img, &status)) return status;
  return img;
}

}  // namespace vlmd::engine::image::internal
