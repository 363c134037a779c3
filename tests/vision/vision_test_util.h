// Shared helpers of the vision tests: fixture PNG decoding (libpng directly, so these tests do
// not depend on the image module) and a loaded encoder with its execution context.
#pragma once

#include <memory>
#include <string>

#include <png.h>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/preprocess_resize.h"
#include "engine/models/vision_encoder.h"
#include "test_util.h"

namespace vlmd::testing {

// Decodes an 8-bit PNG into packed RGB; empty image (width 0) on failure.
inline engine::models::RgbImage ReadPngRgb(const std::string& path) {
  engine::models::RgbImage out;
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str())) return out;
  img.format = PNG_FORMAT_RGB;
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr)) return {};
  out.width = static_cast<int32_t>(img.width);
  out.height = static_cast<int32_t>(img.height);
  return out;
}

struct LoadedEncoder {
  std::unique_ptr<engine::models::VisionEncoder> encoder;
  engine::models::VisionContext ctx;
  std::unique_ptr<ThreadPool> pool;
};

// Loads the mmproj at `path`; the encoder is null when loading failed (the test reports it).
// `precision`: kExact loads the GGUF rows as they are; kFast packs float matrices for this CPU
// (int8 blocks, or bf16 tiles on AMX) when it can.
inline std::unique_ptr<LoadedEncoder> LoadEncoderFile(
    const std::string& path, std::string* error,
    engine::ops::Precision precision = engine::ops::Precision::kExact) {
  auto le = std::make_unique<LoadedEncoder>();
  auto file = engine::gguf::GgufFile::Open(path);
  if (!file.ok()) {
    *error = file.status().ToString();
    return le;
  }
  auto isa = engine::kernels::SelectIsa();
  if (!isa.ok()) {
    *error = isa.status().ToString();
    return le;
  }
  const auto* kt = &engine::kernels::GetKernelTable(*isa);
  engine::ops::WeightPacking packing;
  if (precision == engine::ops::Precision::kFast) packing = {kt, precision};
  auto enc = engine::models::VisionEncoder::Load(
      std::shared_ptr<const engine::gguf::GgufFile>(std::move(*file)), packing);
  if (!enc.ok()) {
    *error = enc.status().ToString();
    return le;
  }
  le->encoder = std::move(*enc);
  le->ctx.kernels = kt;
  le->pool = std::make_unique<ThreadPool>(2);
  le->ctx.pool = le->pool.get();
  return le;
}

// LoadEncoderFile on `fixture`/mmproj.gguf.
inline std::unique_ptr<LoadedEncoder> LoadEncoder(
    const std::string& fixture, std::string* error,
    engine::ops::Precision precision = engine::ops::Precision::kExact) {
  return LoadEncoderFile(FixturePath(fixture + "/mmproj.gguf"), error, precision);
}

}  // namespace vlmd::testing
