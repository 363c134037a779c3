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
    a = Result<std::shared_ptr<const void>>(InternalError("dropped"));
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
    first = Result<std::shared_ptr<const void>>(InternalError("released"));
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
  limits.budget = std::make_shared<DecodeBudget>(uint64_t(w) * h * 4, milliseconds(20));
  {
    Result<Image> a = DecodeImage(png, limits);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(limits.budget->in_use(), uint64_t(w) * h * 4);
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
  limits.budget = std::make_shared<DecodeBudget>(uint64_t(w) * h * 4 - 1, milliseconds(20));
  EXPECT_EQ(DecodeImage(png, limits).status().code(), StatusCode::kOutOfRange);
}

// One request's second image that cannot fit beside its first is refused at once (it would wait
// for bytes its own request holds), not after the wait.
TEST(DecodeBudget, ARequestsImagesThatCannotFitTogetherAreRefusedAtOnce) {
  const int w = 64, h = 48;
  const testing::Bytes png =
      testing::EncodePng({w, h, PNG_COLOR_TYPE_RGB, 8}, testing::Bytes(size_t(w) * h * 3, 7));
  DecodeLimits limits;
  limits.budget = std::make_shared<DecodeBudget>(uint64_t(w) * h * 6, std::chrono::seconds(30));
  Result<Image> first = DecodeImage(png, limits);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->budget_bytes, uint64_t(w) * h * 4);
  limits.budget_held = first->budget_bytes;
  const auto t0 = std::chrono::steady_clock::now();
  Result<Image> second = DecodeImage(png, limits);
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfRange) << second.status().ToString();
  EXPECT_NE(second.status().message().find("images"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));  // not the 30 s wait
}

}  // namespace
}  // namespace vlmd::engine::image
