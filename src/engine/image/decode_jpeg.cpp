// JPEG decoding with libjpeg-turbo (errors caught with longjmp, never exit()) and EXIF
// orientation from APP1, parsed here with explicit bounds checks.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include <jpeglib.h>
#include <jerror.h>

#include "engine/image/decoders.h"

namespace vlmd::engine::image::internal {

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg hands us a jpeg_error_mgr*
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (msg_level -1) signal corrupt or truncated data that libjpeg would silently pad
// (e.g. "Premature end of JPEG file" fills the rest with gray). A server must not embed a
// half-invented image, so they are fatal, except for harmless ones about stray bytes.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  const int code = cinfo->err->msg_code;
  if (code == JWRN_EXTRANEOUS_DATA || code == JWRN_ADOBE_XFORM) return;
  ErrorExit(cinfo);
}

void OutputMessage(j_common_ptr) {}  // never print to stderr

// A progressive JPEG may carry hundreds of scans (libjpeg takes up to 896 empty ones without a
// warning), each a pass over the whole coefficient buffer: a 1.4 MB 7000x7000 file decoded 50x
// slower than with its 2 scans. Real encoders write about 10 (mozjpeg's optimized scripts a few
// more); past kMaxScans the decode stops, as libjpeg-turbo advises (djpeg -maxscans).
constexpr int kMaxScans = 64;

void ProgressMonitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number <= kMaxScans) return;
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  std::snprintf(err->message, sizeof(err->message), "more than %d progressive scans", kMaxScans);
  std::longjmp(err->jump, 1);
}

// Finds the frame dimensions by walking the marker segments up to the first SOFn, so that a
// bomb header is rejected by our limits (with a clear message) before libjpeg allocates.
bool ScanSofDimensions(std::span<const uint8_t> b, uint32_t* width, uint32_t* height,
                       uint32_t* precision) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= b.size()) {
    if (b[pos] != 0xFF) return false;
    const uint8_t marker = b[pos + 1];
    if (marker == 0xFF) { ++pos; continue; }  // fill byte
    const size_t len = (b[pos + 2] << 8) | b[pos + 3];
    if (len < 2) return false;
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                     marker != 0xCC;
    if (sof) {
      if (len < 7 || pos + 9 > b.size()) return false;
      *precision = b[pos + 4];
      *height = (b[pos + 5] << 8) | b[pos + 6];
      *width = (b[pos + 7] << 8) | b[pos + 8];
      return true;
    }
    if (marker == 0xDA || marker == 0xD9) return false;  // scan before frame: malformed
    pos += 2 + len;
  }
  return false;
}

// The largest libjpeg DCT scale denominator (8, 4, 2; 1: full size) whose result the caller
// accepts. `transposed`: EXIF orientation 5-8, whose shown image swaps the stored sides.
unsigned DctDenominator(uint32_t width, uint32_t height, bool transposed,
                        const std::function<bool(ImageSize, ImageSize)>& accept_reduced) {
  auto shown = [&](uint32_t w, uint32_t h) {
    return transposed ? ImageSize{static_cast<int32_t>(h), static_cast<int32_t>(w)}
                      : ImageSize{static_cast<int32_t>(w), static_cast<int32_t>(h)};
  };
  for (unsigned d : {8u, 4u, 2u}) {
    // libjpeg's scaled size: ceil(side / d).
    if (accept_reduced(shown(width, height), shown((width + d - 1) / d, (height + d - 1) / d))) {
      return d;
    }
  }
  return 1;
}

// What a decode of `cinfo` (header read, output size computed) holds at its peak: the RGB output,
// then either libjpeg's whole-image coefficient buffer (a progressive or multi-scan file: 2 bytes
// a coefficient, every block of every component, rounded up to whole MCUs) or, once that is
// freed, the rotated copy that an EXIF orientation makes.
uint64_t JpegPeakBytes(const jpeg_decompress_struct& cinfo, int orientation) {
  const uint64_t output = uint64_t{cinfo.output_width} * cinfo.output_height * 3;
  uint64_t coefficients = 0;
  if (jpeg_has_multiple_scans(const_cast<jpeg_decompress_struct*>(&cinfo))) {
    for (int c = 0; c < cinfo.num_components; ++c) {
      const jpeg_component_info& comp = cinfo.comp_info[c];
      coefficients += (uint64_t{comp.width_in_blocks} + comp.h_samp_factor) *
                      (uint64_t{comp.height_in_blocks} + comp.v_samp_factor) * DCTSIZE2 *
                      sizeof(JCOEF);
    }
  }
  const uint64_t rotated = orientation > 1 ? output : 0;
  return output + std::max(coefficients, rotated);
}

// The setjmp frame holds only trivially destructible locals; everything with a destructor lives
// in the caller (`out`), so a longjmp never skips a destructor.
bool DecodeWithLibjpeg(std::span<const uint8_t> b, const DecodeLimits& limits, Image* out,
                       Status* status, std::vector<uint8_t>* exif) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = ErrorExit;
  err.pub.emit_message = EmitMessage;
  err.pub.output_message = OutputMessage;
  err.message[0] = '\0';
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    *status = DataLossError(std::string("jpeg: ") + err.message);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_progress_mgr progress{};
  progress.progress_monitor = ProgressMonitor;
  cinfo.progress = &progress;
  // Bounds libjpeg's own working memory (progressive coefficient buffers etc.).
  cinfo.mem->max_memory_to_use = 512L << 20;
  jpeg_mem_src(&cinfo, b.data(), static_cast<unsigned long>(b.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  {  // scoped: no object with a destructor may be alive when libjpeg longjmps later
    Status dims = CheckDimensions("jpeg", cinfo.image_width, cinfo.image_height, limits, 0);
    if (!dims.ok()) {
      jpeg_destroy_decompress(&cinfo);
      *status = dims;
      return false;
    }
  }
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 &&
        std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      exif->assign(m->data, m->data + m->data_length);
      break;
    }
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  const int orientation = ExifOrientation(*exif);
  if (limits.accept_reduced) {
    cinfo.scale_num = 1;
    cinfo.scale_denom = DctDenominator(cinfo.image_width, cinfo.image_height, orientation >= 5,
                                       limits.accept_reduced);
  }
  jpeg_calc_output_dimensions(&cinfo);
  {  // the budget, from the header libjpeg decodes (not the marker scan's guess) and the scale
    Status reserved = ReserveDecodeBytes(limits, JpegPeakBytes(cinfo, orientation));
    if (!reserved.ok()) {
      jpeg_destroy_decompress(&cinfo);
      *status = reserved;
      return false;
    }
  }
  jpeg_start_decompress(&cinfo);
  AllocateRgb(static_cast<int32_t>(cinfo.output_width), static_cast<int32_t>(cinfo.output_height),
              out);
  const size_t width = cinfo.output_width;
  if (cmyk) {
    // Row buffer from libjpeg's pool: freed by jpeg_destroy_decompress on every path.
    JSAMPARRAY row = (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo),
                                                JPOOL_IMAGE, width * 4, 1);
    while (cinfo.output_scanline < cinfo.output_height) {
      uint8_t* dst = out->rgb.data() + cinfo.output_scanline * width * 3;
      jpeg_read_scanlines(&cinfo, row, 1);
      // Adobe writes inverted CMYK (the common case for CMYK JPEGs): RGB = stored * K / 255.
      for (size_t x = 0; x < width; ++x) {
        const uint8_t* p = row[0] + 4 * x;
        for (int c = 0; c < 3; ++c) {
          dst[3 * x + c] = static_cast<uint8_t>((p[c] * p[3] + 127) / 255);
        }
      }
    }
  } else {
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = out->rgb.data() + cinfo.output_scanline * width * 3;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

int ExifOrientation(std::span<const uint8_t> app1) {
  // "Exif\0\0" then a TIFF header: byte order, 42, offset of IFD0 (from the TIFF start).
  if (app1.size() < 6 + 8) return 1;
  const std::span<const uint8_t> t = app1.subspan(6);
  bool little;
  if (t[0] == 'I' && t[1] == 'I') little = true;
  else if (t[0] == 'M' && t[1] == 'M') little = false;
  else return 1;
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? (t[at] | t[at + 1] << 8) : (t[at] << 8 | t[at + 1]);
  };
  auto u32 = [&](size_t at) -> uint64_t {
    return little ? (u16(at) | static_cast<uint64_t>(u16(at + 2)) << 16)
                  : (static_cast<uint64_t>(u16(at)) << 16 | u16(at + 2));
  };
  if (u16(2) != 42) return 1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > t.size()) return 1;
  const uint32_t count = u16(ifd);
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t entry = ifd + 2 + 12ull * i;
    if (entry + 12 > t.size()) return 1;
    if (u16(entry) != 0x0112) continue;
    // Orientation: type SHORT (3), count 1, value left-justified in the 4-byte field.
    if (u16(entry + 2) != 3 || u32(entry + 4) != 1) return 1;
    const uint32_t v = u16(entry + 8);
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

void ApplyOrientation(int orientation, Image* image) {
  if (orientation <= 1 || orientation > 8) return;
  const size_t w = image->width, h = image->height;
  const bool swap = orientation >= 5;
  const size_t ow = swap ? h : w, oh = swap ? w : h;
  std::vector<uint8_t> out(image->rgb.size());
  for (size_t oy = 0; oy < oh; ++oy) {
    for (size_t ox = 0; ox < ow; ++ox) {
      size_t x = ox, y = oy;  // source pixel shown at (ox, oy)
      switch (orientation) {
        case 2: x = w - 1 - ox; y = oy; break;           // mirror horizontal
        case 3: x = w - 1 - ox; y = h - 1 - oy; break;   // rotate 180
        case 4: x = ox; y = h - 1 - oy; break;           // mirror vertical
        case 5: x = oy; y = ox; break;                   // transpose
        case 6: x = oy; y = h - 1 - ox; break;           // rotate 90 clockwise
        case 7: x = w - 1 - oy; y = h - 1 - ox; break;   // transverse
        case 8: x = w - 1 - oy; y = ox; break;           // rotate 90 counter-clockwise
      }
      std::memcpy(&out[(oy * ow + ox) * 3], &image->rgb[(y * w + x) * 3], 3);
    }
  }
  image->rgb = std::move(out);
  image->width = static_cast<int32_t>(ow);
  image->height = static_cast<int32_t>(oh);
}

Result<Image> DecodeJpeg(std::span<const uint8_t> b, const DecodeLimits& limits) {
  uint32_t sof_w = 0, sof_h = 0, precision = 8;
  if (ScanSofDimensions(b, &sof_w, &sof_h, &precision)) {
    if (precision != 8) {  // 12/16-bit JPEG: valid, but this libjpeg build decodes 8-bit only
      return UnimplementedError("jpeg: " + std::to_string(precision) +
                                "-bit samples are not supported");
    }
    // A zero height means "defined by DNL", which libjpeg rejects with its own message.
    // A bomb is refused here, before libjpeg reads a byte; the budget is reserved from the
    // header libjpeg reads (the scan skips markers as libjpeg does not, and could be fooled).
    if (sof_h != 0) VLMD_RETURN_IF_ERROR(CheckDimensions("jpeg", sof_w, sof_h, limits, 0));
  }
  Image img;
  Status status;
  std::vector<uint8_t> exif;
  if (!DecodeWithLibjpeg(b, limits, &img, &status, &exif)) return status;
  ApplyOrientation(ExifOrientation(exif), &img);
  return img;
}

}  // namespace vlmd::engine::image::internal
