// Test-only encoders: write small images with libpng/libjpeg/libwebp (and BMP/PPM by hand) so
// that the decoders are checked against the reference libraries' own encoders.
#pragma once

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>

namespace vlmd::engine::image::testing {

using Bytes = std::vector<uint8_t>;

// A deterministic, non-separable test pattern (values 0..255).
inline uint8_t Pattern(int x, int y, int c) {
  return static_cast<uint8_t>((x * 37 + y * 11 + c * 85 + x * y * 3) & 255);
}

inline void PutU16Le(Bytes& b, uint32_t v) { b.push_back(v & 255); b.push_back((v >> 8) & 255); }
inline void PutU32Le(Bytes& b, uint32_t v) { PutU16Le(b, v & 0xFFFF); PutU16Le(b, v >> 16); }
inline void PutU32Be(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back((v >> s) & 255);
}

// PNG from raw samples: `samples` holds rows of width * channels(color_type) samples, each
// sample 1 byte (bit_depth <= 8, packed by libpng via png_set_packing) or 2 bytes big-endian
// (bit_depth 16).
struct PngSpec {
  PngSpec(int w, int h, int type = PNG_COLOR_TYPE_RGB, int depth = 8, bool adam7 = false)
      : width(w), height(h), color_type(type), bit_depth(depth), interlace(adam7) {}
  int width, height, color_type, bit_depth;
  bool interlace;
  std::vector<png_color> palette;
  std::vector<uint8_t> trns_alpha;   // palette tRNS
  int trns_gray = -1;                // gray tRNS value
};

inline Bytes EncodePng(const PngSpec& spec, const Bytes& samples) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, size_t n) {
        auto* o = static_cast<Bytes*>(png_get_io_ptr(p));
        o->insert(o->end(), data, data + n);
      },
      nullptr);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) {
    png_set_PLTE(png, info, spec.palette.data(), static_cast<int>(spec.palette.size()));
  }
  if (!spec.trns_alpha.empty()) {
    png_set_tRNS(png, info, spec.trns_alpha.data(), static_cast<int>(spec.trns_alpha.size()),
                 nullptr);
  }
  png_color_16 trns_color{};
  if (spec.trns_gray >= 0) {
    trns_color.gray = static_cast<png_uint_16>(spec.trns_gray);
    png_set_tRNS(png, info, nullptr, 0, &trns_color);
  }
  png_write_info(png, info);
  if (spec.bit_depth < 8) png_set_packing(png);
  const size_t row_bytes = samples.size() / spec.height;
  std::vector<png_bytep> rows(spec.height);
  for (int y = 0; y < spec.height; ++y) {
    rows[y] = const_cast<uint8_t*>(samples.data() + y * row_bytes);
  }
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// JPEG from RGB (components 3), gray (1) or CMYK (4, stored as given: Adobe-inverted). `app1`
// (without marker/length) is written as an APP1 segment when non-empty.
inline Bytes EncodeJpeg(const Bytes& pixels, int width, int height, int components, int quality,
                        const Bytes& app1 = {}, const std::vector<jpeg_scan_info>& scans = {}) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* mem = nullptr;
  unsigned long mem_size = 0;
  jpeg_mem_dest(&cinfo, &mem, &mem_size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space =
      components == 4 ? JCS_CMYK : components == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (!scans.empty()) {  // a progressive scan script
    cinfo.scan_info = scans.data();
    cinfo.num_scans = static_cast<int>(scans.size());
  }
  jpeg_start_compress(&cinfo, TRUE);
  if (!app1.empty()) {
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, app1.data(), static_cast<unsigned>(app1.size()));
  }
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data() + cinfo.next_scanline * width * components);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  Bytes out(mem, mem + mem_size);
  jpeg_destroy_compress(&cinfo);
  std::free(mem);
  return out;
}

// A progressive gray JPEG with a scan per successive-approximation bit of the DC (11: libjpeg's
// encoder takes Al up to 10) and then, with `one_scan_per_ac`, a scan per AC coefficient (63
// more: 74 in all), else one scan of all of them (12 in all).
inline Bytes EncodeProgressiveGrayJpeg(const Bytes& gray, int width, int height, bool one_scan_per_ac) {
  std::vector<jpeg_scan_info> script;
  script.push_back({1, {0}, 0, 0, 0, 10});
  for (int al = 9; al >= 0; --al) script.push_back({1, {0}, 0, 0, al + 1, al});
  if (one_scan_per_ac) {
    for (int k = 1; k < 64; ++k) script.push_back({1, {0}, k, k, 0, 0});
  } else {
    script.push_back({1, {0}, 1, 63, 0, 0});
  }
  return EncodeJpeg(gray, width, height, 1, 90, {}, script);
}

// APP1 "Exif" payload with IFD0 holding Orientation (and one unrelated tag before it).
inline Bytes ExifApp1(int orientation, bool big_endian) {
  Bytes t;
  auto u16 = [&](uint32_t v) {
    if (big_endian) { t.push_back(v >> 8); t.push_back(v & 255); }
    else { t.push_back(v & 255); t.push_back(v >> 8); }
  };
  auto u32 = [&](uint32_t v) {
    if (big_endian) { u16(v >> 16); u16(v & 0xFFFF); } else { u16(v & 0xFFFF); u16(v >> 16); }
  };
  t.push_back(big_endian ? 'M' : 'I');
  t.push_back(big_endian ? 'M' : 'I');
  u16(42);
  u32(8);   // IFD0 right after the header
  u16(2);   // two entries
  u16(0x010F); u16(2); u32(4); u32(0);                    // Make (ASCII, offset unused)
  u16(0x0112); u16(3); u32(1); u16(orientation); u16(0);  // Orientation SHORT
  u32(0);   // no next IFD
  Bytes app1(6 + t.size(), 0);  // "Exif\0\0" + TIFF
  std::copy_n("Exif", 4, app1.begin());
  std::copy(t.begin(), t.end(), app1.begin() + 6);
  return app1;
}

inline Bytes EncodeWebpLossless(const Bytes& pixels, int width, int height, bool rgba) {
  uint8_t* out = nullptr;
  const size_t n = rgba ? WebPEncodeLosslessRGBA(pixels.data(), width, height, width * 4, &out)
                        : WebPEncodeLosslessRGB(pixels.data(), width, height, width * 3, &out);
  Bytes b(out, out + n);
  WebPFree(out);
  return b;
}

inline Bytes EncodeWebpLossy(const Bytes& rgb, int width, int height, float quality) {
  uint8_t* out = nullptr;
  const size_t n = WebPEncodeRGB(rgb.data(), width, height, width * 3, quality, &out);
  Bytes b(out, out + n);
  WebPFree(out);
  return b;
}

// Uncompressed BMP (BITMAPINFOHEADER) from RGB; bpp 24 or 32 (X byte = 0x7F, ignored).
inline Bytes EncodeBmp(const Bytes& rgb, int width, int height, int bpp, bool top_down) {
  const uint32_t stride = (width * bpp + 31) / 32 * 4;
  Bytes b = {'B', 'M'};
  PutU32Le(b, 54 + stride * height);
  PutU32Le(b, 0);
  PutU32Le(b, 54);
  PutU32Le(b, 40);
  PutU32Le(b, width);
  PutU32Le(b, top_down ? static_cast<uint32_t>(-height) : height);
  PutU16Le(b, 1);
  PutU16Le(b, bpp);
  PutU32Le(b, 0);
  PutU32Le(b, stride * height);
  PutU32Le(b, 2835); PutU32Le(b, 2835); PutU32Le(b, 0); PutU32Le(b, 0);
  for (int r = 0; r < height; ++r) {
    const int y = top_down ? r : height - 1 - r;
    size_t written = 0;
    for (int x = 0; x < width; ++x) {
      const uint8_t* p = &rgb[(y * width + x) * 3];
      b.push_back(p[2]); b.push_back(p[1]); b.push_back(p[0]);
      if (bpp == 32) b.push_back(0x7F);
      written += bpp / 8;
    }
    for (; written < stride; ++written) b.push_back(0);
  }
  return b;
}

// Binary PNM: magic "P6"/"P5", header with a comment, samples as given (1 or 2 bytes each).
inline Bytes EncodePnm(const char* magic, int width, int height, int maxval,
                       const std::vector<uint32_t>& samples) {
  const std::string header = std::string(magic) + "\n# vlmd test\n" + std::to_string(width) +
                             " " + std::to_string(height) + "\n" + std::to_string(maxval) + "\n";
  Bytes b(header.begin(), header.end());
  for (uint32_t s : samples) {
    if (maxval > 255) b.push_back(s >> 8);
    b.push_back(s & 255);
  }
  return b;
}

// RGB pattern image of width x height.
inline Bytes PatternRgb(int width, int height) {
  Bytes rgb;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) rgb.push_back(Pattern(x, y, c));
  return rgb;
}

}  // namespace vlmd::engine::image::testing
