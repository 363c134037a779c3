// Token-bucket rate limiter, driven with injected times.
#include "serve/policy/rate_limiter.h"

#include <gtest/gtest.h>

#include <chrono>

namespace vlmd::serve::policy {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

const Clock::time_point kT0 = Clock::time_point(std::chrono::hours(1000));

TEST(RateLimiter, BurstThenRefuse) {
  RateLimiter rl;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(rl.Take("a", 1.0, 3.0, kT0).allowed) << i;
  RateLimiter::Decision d = rl.Take("a", 1.0, 3.0, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_s, 1.0, 1e-9);
}

TEST(RateLimiter, RefillsOneTokenAfterOneOverRate) {
  RateLimiter rl;
  const double rate = 4.0;  // one token every 250 ms
  EXPECT_TRUE(rl.Take("a", rate, 1.0, kT0).allowed);
  EXPECT_FALSE(rl.Take("a", rate, 1.0, kT0 + milliseconds(100)).allowed);
  EXPECT_FALSE(rl.Take("a", rate, 1.0, kT0 + milliseconds(240)).allowed);
  EXPECT_TRUE(rl.Take("a", rate, 1.0, kT0 + milliseconds(250)).allowed);
  EXPECT_FALSE(rl.Take("a", rate, 1.0, kT0 + milliseconds(250)).allowed);
}

TEST(RateLimiter, RefillWithInexactRate) {
  RateLimiter rl;
  // 1/3 s is not a whole number of nanoseconds; one token must still be back after it.
  EXPECT_TRUE(rl.Take("a", 3.0, 1.0, kT0).allowed);
  EXPECT_TRUE(rl.Take("a", 3.0, 1.0, kT0 + std::chrono::nanoseconds(333333333)).allowed);
  EXPECT_FALSE(rl.Take("a", 3.0, 1.0, kT0 + std::chrono::nanoseconds(333333334)).allowed);
}

TEST(RateLimiter, RetryAfterCountsPartialTokens) {
  RateLimiter rl;
  EXPECT_TRUE(rl.Take("a", 2.0, 1.0, kT0).allowed);
  RateLimiter::Decision d = rl.Take("a", 2.0, 1.0, kT0 + milliseconds(100));  // 0.2 tokens back
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_s, 0.4, 1e-9);
  EXPECT_TRUE(rl.Take("a", 2.0, 1.0, kT0 + milliseconds(500)).allowed);
}

TEST(RateLimiter, RefillIsCappedAtBurst) {
  RateLimiter rl;
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(rl.Take("a", 10.0, 2.0, kT0).allowed);
  const auto later = kT0 + std::chrono::seconds(60);  // would be 600 tokens without the cap
  EXPECT_TRUE(rl.Take("a", 10.0, 2.0, later).allowed);
  EXPECT_TRUE(rl.Take("a", 10.0, 2.0, later).allowed);
  EXPECT_FALSE(rl.Take("a", 10.0, 2.0, later).allowed);
}

TEST(RateLimiter, KeysAreIndependent) {
  RateLimiter rl;
  EXPECT_TRUE(rl.Take("a", 1.0, 1.0, kT0).allowed);
  EXPECT_FALSE(rl.Take("a", 1.0, 1.0, kT0).allowed);
  EXPECT_TRUE(rl.Take("b", 1.0, 1.0, kT0).allowed);
  EXPECT_FALSE(rl.Take("b", 1.0, 1.0, kT0).allowed);
}

TEST(RateLimiter, ZeroRateIsUnlimited) {
  RateLimiter rl;
  for (int i = 0; i < 1000; ++i) {
    RateLimiter::Decision d = rl.Take("free", 0.0, 0.0, kT0);
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(d.retry_after_s, 0.0);
  }
}

TEST(RateLimiter, EarlierTimeDoesNotRefill) {
  RateLimiter rl;
  EXPECT_TRUE(rl.Take("a", 1.0, 1.0, kT0).allowed);
  EXPECT_FALSE(rl.Take("a", 1.0, 1.0, kT0 - std::chrono::seconds(5)).allowed);
  EXPECT_TRUE(rl.Take("a", 1.0, 1.0, kT0 + std::chrono::seconds(1)).allowed);
}

}  // namespace
}  // namespace vlmd::serve::policy
