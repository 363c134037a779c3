// DecodeImage on the fixture PNGs (against an independent zlib-based decoding) and round trips
// through every format's reference encoder: PNG color types/depths, JPEG + EXIF, WebP, BMP, PNM.
#include <cmath>
#include <cstdlib>

#include <gtest/gtest.h>

#include "engine/image/image.h"
#include "image/test_encoders.h"
#include "test_util.h"

namespace vlmd::engine::image {
namespace {

using testing::Bytes;
using testing::Pattern;

struct Px { int x, y; uint8_t r, g, b; };

void ExpectPixel(const Image& img, const Px& p, int tol = 0) {
  const uint8_t* q = &img.rgb[(static_cast<size_t>(p.y) * img.width + p.x) * 3];
  EXPECT_NEAR(q[0], p.r, tol) << "R at " << p.x << "," << p.y;
  EXPECT_NEAR(q[1], p.g, tol) << "G at " << p.x << "," << p.y;
  EXPECT_NEAR(q[2], p.b, tol) << "B at " << p.x << "," << p.y;
}

Image MustDecode(const Bytes& bytes, const DecodeLimits& limits = {}) {
  Result<Image> r = DecodeImage(bytes, limits);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->width) * r->height * 3);
  return std::move(r).value();
}

uint8_t OverWhiteRef(int c, int a) {
  return static_cast<uint8_t>(std::lround((c * a + 255.0 * (255 - a)) / 255.0));
}

// Expected values were computed once by a separate Python decoder (zlib + PNG unfiltering).
struct FixtureCase { const char* path; int w, h; std::vector<Px> px; };

TEST(ImageFixtures, MatchIndependentDecoding) {
  const std::vector<FixtureCase> cases = {
      {"tiny-llava/images/img-32x32.png", 32, 32,
       {{0, 0, 255, 255, 255}, {31, 31, 255, 255, 255}, {31, 0, 255, 0, 220},
        {0, 31, 0, 255, 220}, {8, 4, 65, 32, 220}, {16, 7, 131, 57, 220},
        {31, 28, 255, 230, 20}, {30, 24, 246, 197, 220}}},
      {"tiny-llava/images/img-64x48.png", 64, 48,
       {{0, 0, 255, 255, 255}, {63, 47, 255, 255, 255}, {63, 0, 255, 0, 220},
        {0, 47, 0, 255, 220}, {26, 6, 105, 32, 20}, {62, 1, 250, 5, 220},
        {49, 27, 198, 146, 20}, {0, 44, 0, 238, 220}}},
      {"tiny-smolvlm/images/img-128x128.png", 128, 128,
       {{0, 0, 255, 255, 255}, {127, 127, 255, 255, 255}, {127, 0, 255, 0, 220},
        {0, 127, 0, 255, 220}, {114, 68, 228, 136, 220}, {58, 26, 116, 52, 20},
        {81, 7, 162, 14, 220}, {5, 6, 10, 12, 20}}},
      {"tiny-smolvlm/images/img-128x96.png", 128, 96,
       {{0, 0, 255, 255, 255}, {127, 95, 255, 255, 255}, {127, 0, 255, 0, 220},
        {0, 95, 0, 255, 220}, {2, 48, 4, 128, 20}, {55, 54, 110, 144, 220},
        {7, 67, 14, 179, 220}, {56, 56, 112, 150, 220}}},
      {"tiny-smolvlm/images/img-50x100.png", 50, 100,
       {{0, 0, 255, 255, 255}, {49, 99, 255, 255, 20}, {49, 0, 255, 0, 220}, {0, 99, 0, 255, 220},
        {31, 70, 161, 180, 220}, {14, 44, 72, 113, 220}, {14, 86, 72, 221, 20},
        {14, 97, 72, 249, 220}}},
  };
  for (const FixtureCase& c : cases) {
    SCOPED_TRACE(c.path);
    const Bytes bytes = vlmd::testing::ReadFileBytes(vlmd::testing::FixturePath(c.path));
    ASSERT_FALSE(bytes.empty());
    EXPECT_EQ(SniffFormat(bytes), ImageFormat::kPng);
    const Image img = MustDecode(bytes);
    ASSERT_EQ(img.width, c.w);
    ASSERT_EQ(img.height, c.h);
    for (const Px& p : c.px) ExpectPixel(img, p);
  }
}

TEST(ImagePng, RgbAndInterlacedAreExact) {
  const int w = 13, h = 7;
  const Bytes rgb = testing::PatternRgb(w, h);
  for (bool interlace : {false, true}) {
    testing::PngSpec spec{w, h, PNG_COLOR_TYPE_RGB, 8, interlace};
    const Image img = MustDecode(testing::EncodePng(spec, rgb));
    ASSERT_EQ(img.width, w);
    ASSERT_EQ(img.height, h);
    EXPECT_EQ(img.rgb, rgb) << "interlace " << interlace;
  }
}

TEST(ImagePng, PaletteWithTransparency) {
  const int w = 9, h = 5;
  testing::PngSpec spec{w, h, PNG_COLOR_TYPE_PALETTE, 4};
  for (int i = 0; i < 16; ++i) {
    spec.palette.push_back({static_cast<png_byte>(i * 16), static_cast<png_byte>(255 - i * 7),
                            static_cast<png_byte>(i * i)});
  }
  spec.trns_alpha = {0, 128, 255, 40};  // entries 4.. are opaque
  Bytes idx;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) idx.push_back((x + 3 * y) % 16);
  const Image img = MustDecode(testing::EncodePng(spec, idx));
  ASSERT_EQ(img.width, w);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int i = idx[y * w + x];
      const int a = i < 4 ? spec.trns_alpha[i] : 255;
      const png_color& p = spec.palette[i];
      ExpectPixel(img, {x, y, OverWhiteRef(p.red, a), OverWhiteRef(p.green, a),
                        OverWhiteRef(p.blue, a)});
    }
  }
}

TEST(ImagePng, GrayDepthsAndGrayTrns) {
  const int w = 11, h = 3;
  for (int depth : {1, 2, 4, 8}) {
    SCOPED_TRACE(depth);
    const int maxv = (1 << depth) - 1;
    Bytes s;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) s.push_back((x + y) % (maxv + 1));
    const Image img = MustDecode(testing::EncodePng({w, h, PNG_COLOR_TYPE_GRAY, depth}, s));
    ASSERT_EQ(img.width, w);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const uint8_t v = static_cast<uint8_t>(s[y * w + x] * 255 / maxv);  // exact scaling
        ExpectPixel(img, {x, y, v, v, v});
      }
    }
  }
  // 8-bit gray with tRNS value 7: those pixels become white.
  testing::PngSpec spec{w, h, PNG_COLOR_TYPE_GRAY, 8};
  spec.trns_gray = 7;
  Bytes s;
  for (int i = 0; i < w * h; ++i) s.push_back(i % 9 == 0 ? 7 : static_cast<uint8_t>(i * 5));
  const Image img = MustDecode(testing::EncodePng(spec, s));
  for (int i = 0; i < w * h; ++i) {
    const uint8_t v = s[i] == 7 ? 255 : s[i];
    ExpectPixel(img, {i % w, i / w, v, v, v});
  }
}

TEST(ImagePng, GrayAlphaAndRgbaCompositeOnWhite) {
  const int w = 8, h = 6;
  Bytes ga, rgba;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      ga.push_back(Pattern(x, y, 0));
      ga.push_back(Pattern(x, y, 2));
      for (int c = 0; c < 4; ++c) rgba.push_back(Pattern(x, y, c));
    }
  }
  const Image g = MustDecode(testing::EncodePng({w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 8}, ga));
  const Image c = MustDecode(testing::EncodePng({w, h, PNG_COLOR_TYPE_RGBA, 8}, rgba));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const uint8_t v = OverWhiteRef(Pattern(x, y, 0), Pattern(x, y, 2));
      ExpectPixel(g, {x, y, v, v, v});
      const int a = Pattern(x, y, 3);
      ExpectPixel(c, {x, y, OverWhiteRef(Pattern(x, y, 0), a), OverWhiteRef(Pattern(x, y, 1), a),
                      OverWhiteRef(Pattern(x, y, 2), a)});
    }
  }
}

// 16-bit channels keep their high byte, as llama.cpp's stb and PIL do (not rounded: 0x12FF is
// 0x12, where rounding would give 0x13).
TEST(ImagePng, SixteenBitKeepsTheHighByte) {
  const int w = 7, h = 4;
  Bytes rgb16, rgba16;
  std::vector<uint16_t> vals;
  for (int i = 0; i < w * h * 4; ++i) vals.push_back(static_cast<uint16_t>(i * 2311 + 97));
  for (int i = 0; i < w * h; ++i) {
    for (int c = 0; c < 4; ++c) {
      const uint16_t v = vals[4 * i + c];
      if (c < 3) { rgb16.push_back(v >> 8); rgb16.push_back(v & 255); }
      rgba16.push_back(v >> 8);
      rgba16.push_back(v & 255);
    }
  }
  const Image a = MustDecode(testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 16}, rgb16));
  const Image b = MustDecode(testing::EncodePng({w, h, PNG_COLOR_TYPE_RGBA, 16}, rgba16));
  for (int i = 0; i < w * h; ++i) {
    const int x = i % w, y = i / w;
    uint8_t e[4];
    for (int c = 0; c < 4; ++c) e[c] = static_cast<uint8_t>(vals[4 * i + c] >> 8);
    ExpectPixel(a, {x, y, e[0], e[1], e[2]});
    ExpectPixel(b, {x, y, OverWhiteRef(e[0], e[3]), OverWhiteRef(e[1], e[3]),
                    OverWhiteRef(e[2], e[3])});
  }
}

// 16x16 image of four 8x8 solid quadrants (JPEG-friendly): TL red, TR green, BL blue, BR white.
Bytes Quadrants(int w, int h) {
  Bytes rgb;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool right = x >= w / 2, bottom = y >= h / 2;
      const uint8_t px[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
      const uint8_t* p = px[(bottom ? 2 : 0) + (right ? 1 : 0)];
      rgb.insert(rgb.end(), p, p + 3);
    }
  }
  return rgb;
}

// Color at the center of the quadrant shown at (qx, qy) in {0,1}^2 of the decoded image.
void ExpectQuadrant(const Image& img, int qx, int qy, const uint8_t (&rgb)[3]) {
  const int x = qx * img.width / 2 + img.width / 4, y = qy * img.height / 2 + img.height / 4;
  ExpectPixel(img, {x, y, rgb[0], rgb[1], rgb[2]}, 12);
}

TEST(ImageJpeg, DecodesWithinQuantizationError) {
  const int w = 24, h = 16;
  Bytes rgb;
  for (int y = 0; y < h; ++y)  // smooth gradient: quality 95 keeps errors small
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) rgb.push_back(static_cast<uint8_t>(40 + x * 5 + y * 3 + c * 20));
  const Image img = MustDecode(testing::EncodeJpeg(rgb, w, h, 3, 95));
  ASSERT_EQ(img.width, w);
  ASSERT_EQ(img.height, h);
  double sum = 0;
  for (size_t i = 0; i < rgb.size(); ++i) sum += std::abs(img.rgb[i] - rgb[i]);
  EXPECT_LT(sum / rgb.size(), 3.0);

  Bytes gray(w * h);
  for (int i = 0; i < w * h; ++i) gray[i] = static_cast<uint8_t>(60 + i % w * 6);
  const Image g = MustDecode(testing::EncodeJpeg(gray, w, h, 1, 95));
  for (int i = 0; i < w * h; ++i) {
    EXPECT_EQ(g.rgb[3 * i], g.rgb[3 * i + 1]);
    EXPECT_EQ(g.rgb[3 * i], g.rgb[3 * i + 2]);
    EXPECT_NEAR(g.rgb[3 * i], gray[i], 6);
  }
}

TEST(ImageJpeg, AdobeCmykConvertsToRgb) {
  // Adobe CMYK JPEGs store inverted ink values, so stored (c, m, y, k) means RGB = (c, m, y) *
  // k / 255. Left half k = 255 (RGB = stored), right half k = 128 (half brightness).
  const int w = 16, h = 8;
  Bytes cmyk;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const uint8_t k = x < w / 2 ? 255 : 128;
      cmyk.insert(cmyk.end(), {200, 100, 50, k});
    }
  }
  const Image img = MustDecode(testing::EncodeJpeg(cmyk, w, h, 4, 95));
  ASSERT_EQ(img.width, w);
  ExpectPixel(img, {4, 4, 200, 100, 50}, 4);
  ExpectPixel(img, {12, 4, 100, 50, 25}, 4);
}

TEST(ImageJpeg, TwelveBitIsUnimplemented) {
  Bytes b = testing::EncodeJpeg(testing::PatternRgb(8, 8), 8, 8, 3, 90);
  for (size_t i = 2; i + 4 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xC0) {
      b[i + 4] = 12;  // SOF precision
      break;
    }
  }
  Result<Image> r = DecodeImage(b);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << r.status().ToString();
}

// A caller that accepts a reduced image gets a JPEG decoded at the largest DCT scale it accepts
// (libjpeg's sizes: ceil(side / d)); it is asked in the shown orientation.
TEST(ImageJpeg, DecodesAtTheDctScaleTheCallerNeeds) {
  const int w = 400, h = 300;
  Bytes rgb;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) rgb.push_back(Pattern(x, y, c));
    }
  }
  const Bytes jpeg = testing::EncodeJpeg(rgb, w, h, 3, 90);
  struct Case { int need_w, need_h, want_w, want_h; };
  for (const Case& c : {Case{90, 70, 100, 75},    // 1/4: 100x75 covers 90x70, 1/8 (50x38) not
                        Case{50, 38, 50, 38},     // 1/8
                        Case{201, 10, 400, 300},  // 1/2 would give 200 < 201: full size
                        Case{0, 0, 50, 38}}) {    // nothing needed: the smallest scale
    DecodeLimits limits;
    int asked_w = 0, asked_h = 0;
    limits.accept_reduced = [&](ImageSize full, ImageSize reduced) {
      asked_w = full.width;
      asked_h = full.height;
      return reduced.width >= c.need_w && reduced.height >= c.need_h;
    };
    const Image img = MustDecode(jpeg, limits);
    EXPECT_EQ(asked_w, w);
    EXPECT_EQ(asked_h, h);
    EXPECT_EQ(img.width, c.want_w) << c.need_w << "x" << c.need_h;
    EXPECT_EQ(img.height, c.want_h) << c.need_w << "x" << c.need_h;
  }
  // Rotated 90 degrees by EXIF (orientation 6): shown 300x400, the need is asked that way.
  const Bytes rotated = testing::EncodeJpeg(rgb, w, h, 3, 90, testing::ExifApp1(6, false));
  DecodeLimits limits;
  limits.accept_reduced = [&](ImageSize full, ImageSize reduced) {
    EXPECT_EQ(full.width, h);
    EXPECT_EQ(full.height, w);
    return reduced.width >= 70 && reduced.height >= 90;  // shown sides: 1/4 gives 75x100
  };
  const Image img = MustDecode(rotated, limits);
  EXPECT_EQ(img.width, 75);
  EXPECT_EQ(img.height, 100);
  // Other formats ignore the hint (decoded whole).
  DecodeLimits png_limits;
  png_limits.accept_reduced = [](ImageSize, ImageSize) { return true; };
  EXPECT_EQ(MustDecode(testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 8}, rgb), png_limits).width, w);
}

TEST(ImageJpeg, ExifOrientationIsApplied) {
  const int w = 32, h = 16;  // non-square so that 90-degree rotations swap dimensions
  const Bytes rgb = Quadrants(w, h);
  const uint8_t kR[3] = {255, 0, 0}, kG[3] = {0, 255, 0}, kB[3] = {0, 0, 255},
                kW[3] = {255, 255, 255};
  struct Case { int orientation; int w, h; const uint8_t (*tl)[3], (*tr)[3], (*bl)[3], (*br)[3]; };
  const Case cases[] = {
      {1, w, h, &kR, &kG, &kB, &kW}, {2, w, h, &kG, &kR, &kW, &kB},
      {3, w, h, &kW, &kB, &kG, &kR}, {4, w, h, &kB, &kW, &kR, &kG},
      {5, h, w, &kR, &kB, &kG, &kW}, {6, h, w, &kB, &kR, &kW, &kG},
      {7, h, w, &kW, &kG, &kB, &kR}, {8, h, w, &kG, &kW, &kR, &kB},
  };
  for (bool big_endian : {false, true}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "orientation " << c.orientation << " be " << big_endian);
      const Image img = MustDecode(
          testing::EncodeJpeg(rgb, w, h, 3, 95, testing::ExifApp1(c.orientation, big_endian)));
      ASSERT_EQ(img.width, c.w);
      ASSERT_EQ(img.height, c.h);
      ExpectQuadrant(img, 0, 0, *c.tl);
      ExpectQuadrant(img, 1, 0, *c.tr);
      ExpectQuadrant(img, 0, 1, *c.bl);
      ExpectQuadrant(img, 1, 1, *c.br);
    }
  }
  // Out-of-range orientation values and broken Exif payloads are ignored (orientation 1).
  for (Bytes app1 : {testing::ExifApp1(9, false), testing::ExifApp1(0, true),
                     Bytes{'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 0xFF, 0xFF, 0xFF, 0x7F}}) {
    const Image img = MustDecode(testing::EncodeJpeg(rgb, w, h, 3, 95, app1));
    ASSERT_EQ(img.width, w);
    ExpectQuadrant(img, 0, 0, kR);
  }
}

TEST(ImageWebp, LosslessIsExactAndAlphaComposites) {
  const int w = 10, h = 7;
  const Bytes rgb = testing::PatternRgb(w, h);
  const Image a = MustDecode(testing::EncodeWebpLossless(rgb, w, h, false));
  ASSERT_EQ(a.width, w);
  ASSERT_EQ(a.height, h);
  EXPECT_EQ(a.rgb, rgb);

  Bytes rgba;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 4; ++c) {
        rgba.push_back(c == 3 ? static_cast<uint8_t>(x * 28) : Pattern(x, y, c));
      }
  const Image b = MustDecode(testing::EncodeWebpLossless(rgba, w, h, true));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int al = x * 28;
      ExpectPixel(b, {x, y, OverWhiteRef(Pattern(x, y, 0), al), OverWhiteRef(Pattern(x, y, 1), al),
                      OverWhiteRef(Pattern(x, y, 2), al)});
    }
  }
}

TEST(ImageWebp, LossyDecodesWithinError) {
  const int w = 32, h = 16;
  const Image img = MustDecode(testing::EncodeWebpLossy(Quadrants(w, h), w, h, 95));
  ASSERT_EQ(img.width, w);
  ExpectQuadrant(img, 0, 0, {255, 0, 0});
  ExpectQuadrant(img, 1, 1, {255, 255, 255});
}

TEST(ImageBmp, BottomUpTopDown24And32Bit) {
  for (int w : {5, 8}) {  // 5: rows need padding at 24 bpp
    const int h = 3;
    const Bytes rgb = testing::PatternRgb(w, h);
    for (int bpp : {24, 32}) {
      for (bool top_down : {false, true}) {
        const Image img = MustDecode(testing::EncodeBmp(rgb, w, h, bpp, top_down));
        ASSERT_EQ(img.width, w);
        ASSERT_EQ(img.height, h);
        EXPECT_EQ(img.rgb, rgb) << "w " << w << " bpp " << bpp << " top_down " << top_down;
      }
    }
  }
}

TEST(ImagePnm, PpmPgmEightAndSixteenBitAndSmallMaxval) {
  const int w = 6, h = 4;
  const Bytes rgb = testing::PatternRgb(w, h);
  std::vector<uint32_t> s8(rgb.begin(), rgb.end()), s16, g15;
  for (uint8_t v : rgb) s16.push_back(v * 257u);
  EXPECT_EQ(MustDecode(testing::EncodePnm("P6", w, h, 255, s8)).rgb, rgb);
  EXPECT_EQ(MustDecode(testing::EncodePnm("P6", w, h, 65535, s16)).rgb, rgb);
  for (int i = 0; i < w * h; ++i) g15.push_back(i % 16);
  const Image g = MustDecode(testing::EncodePnm("P5", w, h, 15, g15));
  ASSERT_EQ(g.width, w);
  for (int i = 0; i < w * h; ++i) {
    const uint8_t v = static_cast<uint8_t>(std::lround(g15[i] * 255.0 / 15));
    ExpectPixel(g, {i % w, i / w, v, v, v});
  }
  // 16-bit gray with a maxval that is not 2^n-1: v * 255 / 1000, rounded.
  std::vector<uint32_t> g1000;
  for (int i = 0; i < w * h; ++i) g1000.push_back(i * 43 % 1001);
  const Image k = MustDecode(testing::EncodePnm("P5", w, h, 1000, g1000));
  for (int i = 0; i < w * h; ++i) {
    const uint8_t v = static_cast<uint8_t>(std::lround(g1000[i] * 255.0 / 1000));
    ExpectPixel(k, {i % w, i / w, v, v, v});
  }
}

TEST(ImageKey, DependsOnPixelsAndShapeNotEncoding) {
  const Bytes rgb = testing::PatternRgb(6, 4);
  const Image png = MustDecode(testing::EncodePng({6, 4, PNG_COLOR_TYPE_RGB, 8}, rgb));
  const Image bmp = MustDecode(testing::EncodeBmp(rgb, 6, 4, 24, false));
  EXPECT_EQ(ImageKey(png), ImageKey(bmp));
  EXPECT_EQ(ImageKey(png).size(), 64u);
  Image transposed_shape = png;
  std::swap(transposed_shape.width, transposed_shape.height);
  EXPECT_NE(ImageKey(png), ImageKey(transposed_shape));
  Image changed = png;
  changed.rgb[17] ^= 1;
  EXPECT_NE(ImageKey(png), ImageKey(changed));
  // The encoded-bytes digest differs between the two files of the same pixels.
  EXPECT_NE(EncodedSha256(testing::EncodePng({6, 4, PNG_COLOR_TYPE_RGB, 8}, rgb)),
            EncodedSha256(testing::EncodeBmp(rgb, 6, 4, 24, false)));
  // Known answer: SHA-256("") (empty input).
  EXPECT_EQ(EncodedSha256({}),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace vlmd::engine::image
