// Complexity score, tiers, sticky weighted split and trust signals (SPEC P5, P6, P8).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "serve/policy/complexity.h"
#include "serve/policy/traffic_split.h"
#include "serve/policy/trust.h"

namespace vlmd::serve::policy {
namespace {

std::vector<uint8_t> Flat(int w, int h, uint8_t v) { return std::vector<uint8_t>(size_t(w) * h * 3, v); }

std::vector<uint8_t> Checker(int w, int h, int cell) {
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const uint8_t v = ((x / cell) + (y / cell)) % 2 ? 255 : 0;
      for (int c = 0; c < 3; ++c) rgb[(size_t(y) * w + x) * 3 + c] = v;
    }
  return rgb;
}

TEST(Complexity, FlatImageHasNoEdges) {
  auto rgb = Flat(64, 48, 128);
  EXPECT_EQ(EdgeDensity(64, 48, rgb), 0.0);
}

TEST(Complexity, FineCheckerboardIsAllEdgesAndCoarseIsFew) {
  auto fine = Checker(64, 64, 2);  // 1-px cells cancel in Sobel (x±1 share a parity)
  auto coarse = Checker(64, 64, 32);
  const double d_fine = EdgeDensity(64, 64, fine);
  const double d_coarse = EdgeDensity(64, 64, coarse);
  EXPECT_GT(d_fine, 0.95);
  // Edges only along the two cell boundaries: 2 bands of 2 px in each direction of 62.
  EXPECT_GT(d_coarse, 0.05);
  EXPECT_LT(d_coarse, 0.2);
}

TEST(Complexity, ASingleVerticalEdgeCountsTwoColumns) {
  const int w = 10, h = 10;
  std::vector<uint8_t> rgb(size_t(w) * h * 3, 0);
  for (int y = 0; y < h; ++y)
    for (int x = 5; x < w; ++x)
      for (int c = 0; c < 3; ++c) rgb[(size_t(y) * w + x) * 3 + c] = 255;
  // Interior is 8x8; columns x=4 and x=5 see the step: 16 of 64 pixels.
  EXPECT_DOUBLE_EQ(EdgeDensity(w, h, rgb), 16.0 / 64.0);
}

TEST(Complexity, LargeImagesAreSampledAndTinyOnesScoreZero) {
  auto big = Checker(2048, 1024, 64);
  const double d = EdgeDensity(2048, 1024, big);
  EXPECT_GT(d, 0.0);
  EXPECT_GT(d, 0.3);  // stride 8: 8-px cells, edge bands of 2 in 8 both ways
  EXPECT_LT(d, 0.5);
  auto tiny = Flat(2, 2, 0);
  EXPECT_EQ(EdgeDensity(2, 2, tiny), 0.0);
  std::vector<uint8_t> short_buffer(10);
  EXPECT_EQ(EdgeDensity(64, 64, short_buffer), 0.0);
}

TEST(Complexity, TokenEntropy) {
  EXPECT_EQ(TokenEntropyScore({}), 0.0);
  std::vector<int32_t> same(50, 7);
  EXPECT_EQ(TokenEntropyScore(same), 0.0);
  std::vector<int32_t> four{1, 2, 3, 4};  // 2 bits
  EXPECT_DOUBLE_EQ(TokenEntropyScore(four), 2.0 / 8.0);
  std::vector<int32_t> many(1024);
  for (int i = 0; i < 1024; ++i) many[i] = i;  // 10 bits: saturates
  EXPECT_DOUBLE_EQ(TokenEntropyScore(many), 1.0);
}

TEST(Complexity, ScoreAndTiers) {
  EXPECT_DOUBLE_EQ(ComplexityScore(std::nullopt, 0.4), 0.4);
  EXPECT_DOUBLE_EQ(ComplexityScore(0.8, 0.4), 0.6);
  EXPECT_DOUBLE_EQ(ComplexityScore(0.8, 0.4, {.image = 3, .text = 1}), 0.7);
  EXPECT_EQ(PickTier(0.0), Tier::kLight);
  EXPECT_EQ(PickTier(0.29), Tier::kLight);
  EXPECT_EQ(PickTier(0.3), Tier::kBalanced);
  EXPECT_EQ(PickTier(0.69), Tier::kBalanced);
  EXPECT_EQ(PickTier(0.7), Tier::kRobust);
  EXPECT_EQ(PickTier(0.5, {.light_below = 0.6, .robust_from = 0.9}), Tier::kLight);
  EXPECT_STREQ(TierName(Tier::kRobust), "robust");
}

TEST(TrafficSplit, PickWeightedFollowsCumulativeWeights) {
  const std::vector<double> w{80, 20};
  EXPECT_EQ(PickWeighted(w, 0.0), 0);
  EXPECT_EQ(PickWeighted(w, 0.79), 0);
  EXPECT_EQ(PickWeighted(w, 0.8), 1);
  EXPECT_EQ(PickWeighted(w, 0.999), 1);
  const std::vector<double> zero_first{0, 5};
  EXPECT_EQ(PickWeighted(zero_first, 0.0), 1);
  const std::vector<double> none{0, 0};
  EXPECT_EQ(PickWeighted(none, 0.5), -1);
  EXPECT_EQ(PickWeighted({}, 0.5), -1);
}

TEST(TrafficSplit, StickyAndCloseToTheWeights) {
  const std::vector<double> w{80, 20};
  int canary = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const std::string key = "client-" + std::to_string(i);
    const double b = StickyBucket("vision", key);
    ASSERT_GE(b, 0.0);
    ASSERT_LT(b, 1.0);
    EXPECT_EQ(b, StickyBucket("vision", key));  // sticky
    canary += PickWeighted(w, b) == 1;
  }
  // 20% +- 4 standard deviations of a binomial(4000, 0.2) (sd = 25).
  EXPECT_NEAR(canary, n / 5, 100);
  EXPECT_NE(StickyBucket("vision", "a"), StickyBucket("other", "a"));  // salted by route
}

TEST(TrafficSplit, RaisingTheCanaryWeightOnlyMovesClientsToTheCanary) {
  const std::vector<double> before{90, 10}, after{50, 50};
  for (int i = 0; i < 1000; ++i) {
    const double b = StickyBucket("r", std::to_string(i));
    if (PickWeighted(before, b) == 1) {
      EXPECT_EQ(PickWeighted(after, b), 1);
    }
  }
}

TEST(Trust, MeanEntropyMinProbAndFlag) {
  const std::vector<float> entropy{1.0f, 3.0f};
  const std::vector<float> logprobs{std::log(0.9f), std::log(0.25f)};
  TrustSignals t = ComputeTrust(entropy, logprobs, 1.5);
  EXPECT_DOUBLE_EQ(t.mean_entropy_bits, 2.0);
  EXPECT_NEAR(t.min_token_prob, 0.25, 1e-6);
  EXPECT_TRUE(t.flagged);
  EXPECT_FALSE(ComputeTrust(entropy, logprobs, 2.5).flagged);
  EXPECT_FALSE(ComputeTrust(entropy, logprobs, 0).flagged);  // disabled
  TrustSignals none = ComputeTrust({}, {}, 1.0);
  EXPECT_EQ(none.mean_entropy_bits, 0.0);
  EXPECT_EQ(none.min_token_prob, 1.0);
  EXPECT_FALSE(none.flagged);
}

}  // namespace
}  // namespace vlmd::serve::policy
