// Sampler: greedy ties, reproducibility, the filters, the penalty and token statistics.
#include "engine/runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include <cmath>
#include <map>

namespace vlmd::engine::runtime {
namespace {

TEST(SamplerTest, GreedyTakesFirstMaximum) {
  Sampler s(SamplingParams{});
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(s.Sample(logits, {}), 1);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDiffers) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.Sample(logits, {}));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(SamplerTest, TemperatureOneFollowsSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(5.0f)};  // p = 1/8, 2/8, 5/8
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p);
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[s.Sample(logits, {})];
  // 5 sigma of a binomial with n = 40000 is < 0.013 in frequency.
  EXPECT_NEAR(counts[0] / double(n), 1.0 / 8, 0.013);
  EXPECT_NEAR(counts[1] / double(n), 2.0 / 8, 0.013);
  EXPECT_NEAR(counts[2] / double(n), 5.0 / 8, 0.013);
}

TEST(SamplerTest, TopKOneIsGreedyAndTopPKeepsTheHead) {
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f, 4.9f};
  SamplingParams p;
  p.temperature = 2.0f;
  p.top_k = 1;
  Sampler k1(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(k1.Sample(logits, {}), 1);
  p.top_k = 0;
  p.top_p = 0.5f;  // token 1 alone has p ~0.5, together with 3 > 0.5: only {1, 3} survive
  Sampler tp(p);
  for (int i = 0; i < 200; ++i) {
    const int t = tp.Sample(logits, {});
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  const std::vector<float> logits = {0.0f, 10.0f, 9.0f, -5.0f};
  SamplingParams p;
  p.temperature = 5.0f;
  p.min_p = 0.2f;  // keeps tokens with p >= 0.2 p_max: 1 and 2 (e^-1 = 0.37)
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    const int t = s.Sample(logits, {});
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

TEST(SamplerTest, RepetitionPenaltyDemotesSeenTokens) {
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f};
  SamplingParams p;
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  const std::vector<int32_t> history = {0};
  EXPECT_EQ(s.Sample(logits, history), 1);  // 2.0 / 1.5 < 1.9
  EXPECT_EQ(s.Sample(logits, {}), 0);
}

TEST(SamplerTest, StatsOfUniformAndPeakedDistributions) {
  const std::vector<float> uniform(256, 3.0f);
  TokenStats u = ComputeTokenStats(uniform, 5);
  EXPECT_NEAR(u.entropy_bits, 8.0f, 1e-4);
  EXPECT_NEAR(u.logprob, -std::log(256.0f), 1e-4);
  std::vector<float> peaked(256, 0.0f);
  peaked[9] = 100.0f;
  TokenStats pk = ComputeTokenStats(peaked, 9);
  EXPECT_NEAR(pk.entropy_bits, 0.0f, 1e-3);
  EXPECT_NEAR(pk.logprob, 0.0f, 1e-3);
}

// Greedy picks the first maximum (ties: lowest id) on the vectorized scan, at every position of
// the 8-lane loop and in its tail; NaN logits still give a valid index.
TEST(SamplerTest, GreedyIsTheFirstMaximumAndAlwaysAnIndex) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  for (size_t n : {1u, 7u, 8u, 9u, 100u, 1003u}) {
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      std::vector<float> logits(n, -1.0f);
      logits[at] = 5.0f;
      if (at + 3 < n) logits[at + 3] = 5.0f;  // a later tie loses
      EXPECT_EQ(s.Sample(logits, {}), static_cast<int32_t>(at)) << n << " " << at;
    }
  }
  std::vector<float> nan_first(20, 1.0f);
  nan_first[0] = std::nanf("");
  nan_first[12] = 3.0f;
  const int32_t t = s.Sample(nan_first, {});
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 20);
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = -0.5f;
  Status s = ValidateSamplingParams(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_p"), std::string::npos);
  p = SamplingParams{};
  p.temperature = std::nanf("");
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p = SamplingParams{};
  p.top_k = -1;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
}

// top_p 0 keeps the most likely token only: at any temperature the greedy choice.
TEST(SamplerTest, TopPZeroIsTheMostLikelyToken) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_p = 0.0f;
  ASSERT_TRUE(ValidateSamplingParams(p).ok());
  std::vector<float> logits(20, 0.0f);
  logits[7] = 0.5f;  // the most likely, but far from certain
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    Sampler s(p);
    EXPECT_EQ(s.Sample(logits, {}), 7) << seed;
  }
}

TEST(SamplerTest, TopLogprobsAreTheBestTokensWithSoftmaxLogprobs) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-5.0f, 5.0f);
  std::vector<float> logits(1000);
  for (float& l : logits) l = u(rng);
  logits[10] = logits[20] = 9.0f;  // a tie at the top: lower id first
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  const double log_norm = std::log(z);
  const std::vector<TokenLogprob> top = TopLogprobs(logits, 5, log_norm);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  ASSERT_EQ(top.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(top[i].token, ids[i]) << i;
    EXPECT_NEAR(top[i].logprob, double(logits[ids[i]]) - log_norm, 1e-5) << i;
  }
  EXPECT_EQ(top[0].token, 10);
  EXPECT_EQ(top[1].token, 20);
  // The chosen token's ComputeTokenStats agrees with the same normalizer.
  EXPECT_NEAR(ComputeTokenStats(logits, 10).logprob, top[0].logprob, 1e-5);
  EXPECT_TRUE(TopLogprobs(logits, 0, log_norm).empty());
  EXPECT_EQ(TopLogprobs(std::span<const float>(logits.data(), 3), 10, log_norm).size(), 3u);
}

}  // namespace
}  // namespace vlmd::engine::runtime
