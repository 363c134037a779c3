// Hostile inputs for DecodeImage: truncation of every format at many offsets, decompression-bomb
// headers, size limits, empty/random bytes and random corruption (which must never crash).
#include <random>

#include <gtest/gtest.h>

#include "engine/image/image.h"
#include "image/test_encoders.h"
#include "test_util.h"

namespace vlmd::engine::image {
namespace {

using testing::Bytes;

uint32_t Crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

void PutPngChunk(Bytes& b, const char* type, const Bytes& data) {
  testing::PutU32Be(b, static_cast<uint32_t>(data.size()));
  const size_t start = b.size();
  b.insert(b.end(), type, type + 4);
  b.insert(b.end(), data.begin(), data.end());
  testing::PutU32Be(b, Crc32(&b[start], b.size() - start));
}

// One small valid file per format.
std::vector<std::pair<std::string, Bytes>> SampleFiles() {
  const int w = 12, h = 9;
  const Bytes rgb = testing::PatternRgb(w, h);
  Bytes rgba;
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgba.insert(rgba.end(), rgb.begin() + i, rgb.begin() + i + 3);
    rgba.push_back(static_cast<uint8_t>(i * 7));
  }
  std::vector<uint32_t> samples(rgb.begin(), rgb.end());
  return {
      {"png", testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 8}, rgb)},
      {"png-interlaced", testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 8, true}, rgb)},
      {"jpeg", testing::EncodeJpeg(rgb, w, h, 3, 90, testing::ExifApp1(6, false))},
      {"webp-lossless", testing::EncodeWebpLossless(rgba, w, h, true)},
      {"webp-lossy", testing::EncodeWebpLossy(rgb, w, h, 80)},
      {"bmp", testing::EncodeBmp(rgb, w, h, 24, false)},
      {"ppm", testing::EncodePnm("P6", w, h, 255, samples)},
  };
}

TEST(ImageHostile, SamplesDecode) {
  for (const auto& [name, bytes] : SampleFiles()) {
    Result<Image> r = DecodeImage(bytes);
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
  }
}

// Every strict prefix fails: UNIMPLEMENTED while the magic is incomplete, DATA_LOSS after.
TEST(ImageHostile, TruncationAtEveryOffsetIsDataLoss) {
  for (const auto& [name, bytes] : SampleFiles()) {
    const ImageFormat format = SniffFormat(bytes);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      const std::span<const uint8_t> prefix(bytes.data(), cut);
      Result<Image> r = DecodeImage(prefix);
      ASSERT_FALSE(r.ok()) << name << " cut at " << cut << " of " << bytes.size();
      const StatusCode want = SniffFormat(prefix) == format ? StatusCode::kDataLoss
                                                            : StatusCode::kUnimplemented;
      ASSERT_EQ(r.status().code(), want) << name << " cut at " << cut << ": "
                                         << r.status().ToString();
    }
  }
}

void ExpectBomb(const Bytes& bytes, const char* format) {
  Result<Image> r = DecodeImage(bytes);
  ASSERT_FALSE(r.ok()) << format;
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << r.status().ToString();
  EXPECT_NE(r.status().message().find(format), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("limit"), std::string::npos) << r.status().message();
}

TEST(ImageHostile, PngBombHeaderIsRejectedBeforeDecoding) {
  Bytes b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Bytes ihdr;
  testing::PutU32Be(ihdr, 100000);
  testing::PutU32Be(ihdr, 100000);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  PutPngChunk(b, "IHDR", ihdr);
  PutPngChunk(b, "IDAT", {0x78, 0x9C, 0x03, 0x00});
  PutPngChunk(b, "IEND", {});
  ExpectBomb(b, "png");
}

TEST(ImageHostile, BmpBombHeaderIsRejected) {
  Bytes b = testing::EncodeBmp(testing::PatternRgb(2, 2), 2, 2, 24, false);
  for (int i = 0; i < 4; ++i) b[18 + i] = b[22 + i] = (i == 3 ? 0x3F : 0xFF);  // ~1e9 x 1e9
  ExpectBomb(b, "bmp");
  // Negative width is corrupt, INT32_MIN height cannot be negated.
  Bytes neg = testing::EncodeBmp(testing::PatternRgb(2, 2), 2, 2, 24, false);
  neg[21] = 0xFF; neg[20] = 0xFF; neg[19] = 0xFF; neg[18] = 0xFE;
  EXPECT_EQ(DecodeImage(neg).status().code(), StatusCode::kDataLoss);
  Bytes minh = testing::EncodeBmp(testing::PatternRgb(2, 2), 2, 2, 24, false);
  minh[22] = minh[23] = minh[24] = 0; minh[25] = 0x80;
  EXPECT_EQ(DecodeImage(minh).status().code(), StatusCode::kDataLoss);
}

TEST(ImageHostile, JpegSofBombIsRejected) {
  Bytes b = testing::EncodeJpeg(testing::PatternRgb(16, 16), 16, 16, 3, 90);
  bool patched = false;
  for (size_t i = 2; i + 9 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xC0) {  // baseline SOF0: len(2) precision(1) h(2) w(2)
      b[i + 5] = b[i + 6] = b[i + 7] = b[i + 8] = 0xFF;
      patched = true;
      break;
    }
  }
  ASSERT_TRUE(patched);
  ExpectBomb(b, "jpeg");
}

// Each progressive scan is a pass over the whole coefficient buffer: a file of hundreds of empty
// scans decoded 50x slower than the same picture in 2. Past 64 scans the decode stops; a usual
// progressive file (here 12 scans) decodes.
TEST(ImageHostile, JpegWithTooManyProgressiveScansIsRefused) {
  Bytes gray(64 * 48);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 7);
  const auto usual = DecodeImage(testing::EncodeProgressiveGrayJpeg(gray, 64, 48, false));
  ASSERT_TRUE(usual.ok()) << usual.status().ToString();
  EXPECT_EQ(usual->width, 64);
  const auto many = DecodeImage(testing::EncodeProgressiveGrayJpeg(gray, 64, 48, true));  // 74 scans
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(many.status().message().find("progressive scans"), std::string::npos)
      << many.status().ToString();
}

TEST(ImageHostile, PnmBombHeaderIsRejected) {
  const std::string p6 = "P6\n100000 100000\n255\n";
  ExpectBomb(Bytes(p6.begin(), p6.end()), "ppm");
  const std::string p5 = "P5 999999999 999999999 65535 ";
  ExpectBomb(Bytes(p5.begin(), p5.end()), "pgm");
  const std::string too_long = "P6\n99999999999 1\n255\n";  // 11 digits: malformed, not wrapped
  EXPECT_EQ(DecodeImage(Bytes(too_long.begin(), too_long.end())).status().code(),
            StatusCode::kDataLoss);
}

TEST(ImageHostile, WebpBombHeaderIsRejected) {
  // VP8L header after "VP8L" chunk header: signature 0x2F, then 14-bit width-1, height-1.
  Bytes b = testing::EncodeWebpLossless(testing::PatternRgb(4, 4), 4, 4, false);
  ASSERT_GE(b.size(), 25u);
  ASSERT_EQ(std::string(b.begin() + 12, b.begin() + 16), "VP8L");
  ASSERT_EQ(b[20], 0x2F);
  b[21] = 0xFF;                                    // width-1 low 8 bits
  b[22] = static_cast<uint8_t>(b[22] | 0x3F);      // width-1 high 6 bits -> 16384
  b[22] = static_cast<uint8_t>(b[22] | 0xC0);      // height-1 low 2 bits
  b[23] = 0xFF;                                    // height-1 next 8 bits
  b[24] = static_cast<uint8_t>(b[24] | 0x0F);      // height-1 high 4 bits -> 16384
  ExpectBomb(b, "webp");
}

TEST(ImageHostile, LimitsAreHonoured) {
  const Bytes png = vlmd::testing::ReadFileBytes(
      vlmd::testing::FixturePath("tiny-llava/images/img-64x48.png"));
  ASSERT_FALSE(png.empty());
  DecodeLimits pixels;
  pixels.max_pixels = 64 * 48 - 1;
  EXPECT_EQ(DecodeImage(png, pixels).status().code(), StatusCode::kOutOfRange);
  pixels.max_pixels = 64 * 48;
  EXPECT_TRUE(DecodeImage(png, pixels).ok());
  DecodeLimits bytes;
  bytes.max_bytes = png.size() - 1;
  Result<Image> r = DecodeImage(png, bytes);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("encoded size"), std::string::npos);
  // The byte limit is checked before sniffing: even unknown bytes report the size.
  EXPECT_EQ(DecodeImage(Bytes(100, 0), DecodeLimits{10, 100}).status().code(),
            StatusCode::kOutOfRange);
}

TEST(ImageHostile, EmptyZeroAndRandomBytes) {
  Result<Image> empty = DecodeImage(Bytes{});
  EXPECT_EQ(empty.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(empty.status().message(), "unsupported image format");
  EXPECT_EQ(DecodeImage(Bytes(4096, 0)).status().code(), StatusCode::kUnimplemented);
  std::mt19937 rng(42);
  const std::vector<Bytes> magics = {
      {0xFF, 0xD8, 0xFF}, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'},
      {'R', 'I', 'F', 'F', 0, 1, 0, 0, 'W', 'E', 'B', 'P'}, {'B', 'M'}, {'P', '6'}, {'P', '5'}, {}};
  for (int trial = 0; trial < 400; ++trial) {
    const Bytes& magic = magics[trial % magics.size()];
    Bytes b = magic;
    const size_t n = rng() % 600;
    for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(rng()));
    Result<Image> r = DecodeImage(b);
    if (r.ok()) {  // improbable but legal (e.g. a tiny valid PNM); must then be consistent
      EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->width) * r->height * 3);
    } else {
      EXPECT_TRUE(r.status().code() == StatusCode::kDataLoss ||
                  r.status().code() == StatusCode::kUnimplemented ||
                  r.status().code() == StatusCode::kOutOfRange)
          << r.status().ToString();
    }
  }
}

// Random byte flips of valid files: any outcome but a crash (ASan builds check memory safety);
// successes must be internally consistent and within limits.
TEST(ImageHostile, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(7);
  DecodeLimits limits;
  limits.max_pixels = 1 << 16;
  for (const auto& [name, bytes] : SampleFiles()) {
    for (int trial = 0; trial < 300; ++trial) {
      Bytes b = bytes;
      const int flips = 1 + rng() % 4;
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      Result<Image> r = DecodeImage(b, limits);
      if (r.ok()) {
        EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->width) * r->height * 3) << name;
        EXPECT_LE(static_cast<uint64_t>(r->width) * r->height, limits.max_pixels) << name;
      }
    }
  }
}

}  // namespace
}  // namespace vlmd::engine::image
