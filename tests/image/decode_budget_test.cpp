// The decode budget: decoded bytes in flight bounded across callers. Reservations are held by the
// decoded image and released with it; a decode that cannot fit waits, then is refused.
#include "engine/image/decode_budget.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/image/image.h"
#include "image/test_encoders.h"

namespace vlmd::engine::image {
namespace {

using std::chrono::milliseconds;

TEST(DecodeBudget, ReservesReleasesAndRefuses) {
  auto budget = std::make_shared<DecodeBudget>(1000, milliseconds(20));
  {
    auto a = budget->Reserve(600);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(budget->in_use(), 600u);
    // Does not fit beside a: refused after the wait, counted.
    auto b = budget->Reserve(500);
    EXPECT_EQ(b.status().code(), StatusCode::kUnavailable) << b.status().ToString();
    EXPECT_EQ(budget->refused(), 1u);
    auto copy = *a;  // copies share the reservation
    a = Result<std::shared_ptr<DecodeHold>>(InternalError("dropped"));
    EXPECT_EQ(budget->in_use(), 600u);
  }
  EXPECT_EQ(budget->in_use(), 0u);
  // More than the whole budget can never fit.
  EXPECT_EQ(budget->Reserve(1001).status().code(), StatusCode::kOutOfRange);
}

TEST(DecodeBudget, AWaitingReservationGetsTheBytesWhenTheyAreFreed) {
  auto budget = std::make_shared<DecodeBudget>(1000, milliseconds(5000));
  auto first = budget->Reserve(800);
  ASSERT_TRUE(first.ok());
  std::thread release([&] {
    std::this_thread::sleep_for(milliseconds(50));
    first = Result<std::shared_ptr<DecodeHold>>(InternalError("released"));
  });
  auto second = budget->Reserve(800);  // waits for the release above
  release.join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(budget->in_use(), 800u);
}

TEST(DecodeBudget, DecodedImagesHoldTheirPixelsBytesUntilTheyAreGone) {
  const int w = 64, h = 48;
  const testing::Bytes png =
      testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 8}, testing::Bytes(size_t(w) * h * 3, 7));
  DecodeLimits limits;
  // An RGB PNG decodes in its output and libpng's staging rows, 3 + 3 bytes a pixel; the image
  // then holds its 3.
  limits.budget = std::make_shared<DecodeBudget>(uint64_t(w) * h * 6, milliseconds(20));
  {
    Result<Image> a = DecodeImage(png, limits);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(limits.budget->in_use(), uint64_t(w) * h * 3);
    // A second image does not fit while the first lives: UNAVAILABLE (503 in the server).
    Result<Image> b = DecodeImage(png, limits);
    EXPECT_EQ(b.status().code(), StatusCode::kUnavailable) << b.status().ToString();
  }
  EXPECT_EQ(limits.budget->in_use(), 0u);
  // A failed decode gives its reservation back; an image larger than the budget is 413's code.
  testing::Bytes truncated = png;
  truncated.resize(truncated.size() / 2);
  EXPECT_FALSE(DecodeImage(truncated, limits).ok());
  EXPECT_EQ(limits.budget->in_use(), 0u);
  limits.budget = std::make_shared<DecodeBudget>(uint64_t(w) * h * 6 - 1, milliseconds(20));
  EXPECT_EQ(DecodeImage(png, limits).status().code(), StatusCode::kOutOfRange);
}

// One request's second image that cannot fit beside its first is refused at once (it would wait
// for bytes its own request holds), not after the wait.
TEST(DecodeBudget, ARequestsImagesThatCannotFitTogetherAreRefusedAtOnce) {
  const int w = 64, h = 48;
  const testing::Bytes png =
      testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 8}, testing::Bytes(size_t(w) * h * 3, 7));
  DecodeLimits limits;
  // Room for one decode (6 bytes a pixel at its peak, 3 held after), not for a second beside it.
  limits.budget = std::make_shared<DecodeBudget>(uint64_t(w) * h * 8, std::chrono::seconds(30));
  Result<Image> first = DecodeImage(png, limits);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->budget_bytes, uint64_t(w) * h * 3);
  limits.budget_held = first->budget_bytes;
  const auto t0 = std::chrono::steady_clock::now();
  Result<Image> second = DecodeImage(png, limits);
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfRange) << second.status().ToString();
  EXPECT_NE(second.status().message().find("images"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));  // not the 30 s wait
}

// Each format reserves what its decoder holds at its peak (decoders.h): a baseline JPEG its RGB,
// a progressive one also libjpeg's coefficients (2 bytes each, 64 a block, whole MCUs), one
// with an EXIF rotation the rotated copy, a PNG with alpha 4 bytes of staging, a lossless WebP
// libwebp's ARGB buffer; a JPEG decoded at a DCT scale its scaled size. A budget of exactly the
// peak takes the image, one byte less refuses it (413's code); the decoded image then holds its
// RGB bytes alone.
uint64_t PeakOf(const testing::Bytes& file, bool reduced = false) {
  auto decode = [&](uint64_t capacity, Result<Image>* out) {
    DecodeLimits limits;
    limits.budget = std::make_shared<DecodeBudget>(capacity, milliseconds(20));
    if (reduced) limits.accept_reduced = [](ImageSize, ImageSize) { return true; };
    *out = DecodeImage(file, limits);
    return limits.budget;
  };
  // The smallest capacity that decodes it, by bisection (the peak is under 1 MiB here).
  uint64_t lo = 1, hi = 1 << 20;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    Result<Image> img = InternalError("unset");
    decode(mid, &img);
    if (img.ok()) {
      hi = mid;
    } else {
      EXPECT_EQ(img.status().code(), StatusCode::kOutOfRange) << img.status().ToString();
      lo = mid + 1;
    }
  }
  Result<Image> img = InternalError("unset");
  const auto budget = decode(lo, &img);
  EXPECT_TRUE(img.ok());
  if (img.ok()) {
    EXPECT_EQ(img->budget_bytes, img->rgb.size());
    EXPECT_EQ(budget->in_use(), img->rgb.size());
  }
  return lo;
}

TEST(DecodeBudget, EachFormatReservesItsDecodersPeak) {
  const int w = 64, h = 48;
  const uint64_t n = uint64_t(w) * h;
  const testing::Bytes rgb(n * 3, 90), rgba(n * 4, 200), gray(n, 60);
  EXPECT_EQ(PeakOf(testing::EncodeJpeg(rgb, w, h, 3, 90)), n * 3);
  EXPECT_EQ(PeakOf(testing::EncodeJpeg(rgb, w, h, 3, 90), /*reduced=*/true), n / 64 * 3);  // 1/8: 8x6
  EXPECT_EQ(PeakOf(testing::EncodeJpeg(rgb, w, h, 3, 90, testing::ExifApp1(6, false))), n * 6);
  // Gray 64x48: 8x6 blocks of 64 coefficients, plus a block row and column of margin.
  EXPECT_EQ(PeakOf(testing::EncodeProgressiveGrayJpeg(gray, w, h, false)), n * 3 + 9 * 7 * 64 * 2);
  EXPECT_EQ(PeakOf(testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 8}, rgb)), n * 6);
  EXPECT_EQ(PeakOf(testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB_ALPHA, 8}, rgba)), n * 7);
  EXPECT_EQ(PeakOf(testing::EncodeWebpLossless(rgb, w, h, false)), n * 7);
  EXPECT_EQ(PeakOf(testing::EncodeWebpLossy(rgb, w, h, 80)), n * 4);
}

// The marker scan that refuses bombs before libjpeg reads the file skips segments by their length
// field, which libjpeg does not do for RST and TEM markers: a file can show the scan a 1x1 frame
// hidden in a comment while libjpeg decodes its real one. The budget counts the frame libjpeg
// decodes.
TEST(DecodeBudget, AFrameHiddenFromTheMarkerScanIsCountedAsLibjpegReadsIt) {
  const int w = 64, h = 48;
  const testing::Bytes real = testing::EncodeJpeg(testing::Bytes(size_t(w) * h * 3, 120), w, h, 3, 90);
  testing::Bytes crafted = {0xFF, 0xD8,              // SOI
                            0xFF, 0xD0, 0x00, 0x0F,  // RST0: no length for libjpeg; the scan reads 15
                            0xFF, 0xFE, 0x00, 0x20};  // a comment of 30 bytes
  testing::Bytes comment(30, 0);
  // At byte 19 of the file, where the scan lands: a 1x1 baseline frame header.
  const uint8_t fake_sof[] = {0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00};
  std::copy(std::begin(fake_sof), std::end(fake_sof), comment.begin() + (19 - 10));
  crafted.insert(crafted.end(), comment.begin(), comment.end());
  crafted.insert(crafted.end(), real.begin() + 2, real.end());
  EXPECT_EQ(PeakOf(crafted), uint64_t(w) * h * 3);
}

}  // namespace
}  // namespace vlmd::engine::image
