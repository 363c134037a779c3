// Drift statistics (serve/policy/drift.h): quantile bins, PSI on samples with and without a
// shift, rolling windows that forget, and the baseline file against hostile input.
#include "serve/policy/drift.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"

namespace vlmd::serve::policy {
namespace {

using nlohmann::json;

DriftSample Entropy(double v) {
  DriftSample s;
  s[DriftStat::kMeanEntropy] = v;
  return s;
}

std::vector<DriftSample> Normal(int n, double mean, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(mean, 1.0);
  std::vector<DriftSample> out;
  for (int i = 0; i < n; ++i) out.push_back(Entropy(d(rng)));
  return out;
}

// The counts of `samples` in `b`'s bins of statistic `s`.
std::vector<double> CountsIn(const DriftBaseline& b, DriftStat s, const std::vector<DriftSample>& samples) {
  std::vector<double> c(size_t(b.bins(s)), 0.0);
  for (const DriftSample& x : samples) {
    if (!x[s]) continue;
    const int bin = b.Bin(s, *x[s]);
    if (bin >= 0) c[size_t(bin)] += 1;
  }
  return c;
}

TEST(DriftBaseline, NumericStatisticsGetQuantileBinsAndABinUnderTheRange) {
  std::vector<DriftSample> samples;
  for (int i = 1; i <= 1000; ++i) samples.push_back(Entropy(i));
  const DriftBaseline b = BuildBaseline(samples);
  EXPECT_EQ(b.requests, 1000);
  ASSERT_EQ(b.bins(DriftStat::kMeanEntropy), 12);  // under, ten deciles, over
  const auto& c = b[DriftStat::kMeanEntropy].counts;
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[11], 0);
  for (size_t i = 1; i < 11; ++i) EXPECT_NEAR(c[i], 100, 1) << i;
  EXPECT_EQ(b.Bin(DriftStat::kMeanEntropy, 0.5), 0);      // under the range
  EXPECT_EQ(b.Bin(DriftStat::kMeanEntropy, 5000), 11);    // over it
  // Edges lie between values: a value a rounding step off stays in its bin.
  EXPECT_EQ(b.Bin(DriftStat::kMeanEntropy, 101), b.Bin(DriftStat::kMeanEntropy, 101 + 1e-9));
  EXPECT_EQ(b.Bin(DriftStat::kMeanEntropy, 1), b.Bin(DriftStat::kMeanEntropy, 1 - 1e-9));
  EXPECT_EQ(b.Bin(DriftStat::kMeanEntropy, 1000), b.Bin(DriftStat::kMeanEntropy, 1000 + 1e-9));
  // Statistics no sample showed have no bins and no bin.
  EXPECT_EQ(b.bins(DriftStat::kEmbeddingNorm), 0);
  EXPECT_EQ(b.Bin(DriftStat::kEmbeddingNorm, 1.0), -1);
}

TEST(DriftBaseline, TiedValuesMergeBinsAndValuesOutsideStillSeparate) {
  std::vector<DriftSample> samples(50);
  for (auto& s : samples) s[DriftStat::kVisualTokens] = 64;
  const DriftBaseline b = BuildBaseline(samples);
  ASSERT_EQ(b.bins(DriftStat::kVisualTokens), 3);  // under 64, 64, over 64
  EXPECT_EQ(b.Bin(DriftStat::kVisualTokens, 0), 0);
  EXPECT_EQ(b.Bin(DriftStat::kVisualTokens, 64), 1);
  EXPECT_EQ(b.Bin(DriftStat::kVisualTokens, 65), 2);
  EXPECT_EQ(b[DriftStat::kVisualTokens].counts, (std::vector<double>{0, 50, 0}));
  // Text-only traffic after image traffic: a large PSI.
  std::vector<DriftSample> text_only(50);
  for (auto& s : text_only) s[DriftStat::kVisualTokens] = 0;
  EXPECT_GT(PopulationStabilityIndex(b[DriftStat::kVisualTokens].counts,
                                     CountsIn(b, DriftStat::kVisualTokens, text_only)),
            1.0);
}

TEST(DriftBaseline, CategoricalStatisticsHaveFixedBins) {
  std::vector<DriftSample> samples(4);
  const char* reasons[] = {"stop", "length", "content_filter", "deadline"};
  for (int i = 0; i < 4; ++i) {
    samples[size_t(i)][DriftStat::kFinishReason] = FinishReasonCategory(reasons[i]);
    samples[size_t(i)][DriftStat::kTrustFlagged] = i == 0 ? 1.0 : 0.0;
  }
  EXPECT_EQ(FinishReasonCategory("cancelled"), 3);
  const DriftBaseline b = BuildBaseline(samples);
  EXPECT_EQ(b[DriftStat::kFinishReason].counts, (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(b[DriftStat::kTrustFlagged].counts, (std::vector<double>{3, 1}));
  EXPECT_TRUE(b[DriftStat::kFinishReason].edges.empty());
  EXPECT_EQ(b.Bin(DriftStat::kFinishReason, 4), -1);
  EXPECT_EQ(b.Bin(DriftStat::kFinishReason, 1.5), -1);
  EXPECT_EQ(b.Bin(DriftStat::kFinishReason, 1e300), -1);  // no out-of-range cast
  EXPECT_EQ(b.Bin(DriftStat::kFinishReason, -1e300), -1);
  EXPECT_EQ(b.Bin(DriftStat::kTrustFlagged, std::nan("")), -1);
}

TEST(PopulationStabilityIndex, IsZeroForEqualSharesAndNaNWithoutData) {
  const std::vector<double> a{10, 20, 30}, twice{20, 40, 60};
  EXPECT_NEAR(PopulationStabilityIndex(a, a), 0.0, 1e-12);
  EXPECT_NEAR(PopulationStabilityIndex(a, twice), 0.0, 0.01);  // shares, not counts (smoothing aside)
  EXPECT_TRUE(std::isnan(PopulationStabilityIndex(a, std::vector<double>{0, 0, 0})));
  EXPECT_TRUE(std::isnan(PopulationStabilityIndex(a, std::vector<double>{1, 2})));
  EXPECT_TRUE(std::isnan(PopulationStabilityIndex({}, {})));
  // Symmetric, and finite with empty bins on one side.
  const std::vector<double> b{0, 0, 60};
  EXPECT_NEAR(PopulationStabilityIndex(a, b), PopulationStabilityIndex(b, a), 1e-12);
  EXPECT_TRUE(std::isfinite(PopulationStabilityIndex(a, b)));
}

TEST(PopulationStabilityIndex, SameDistributionStaysUnderTheThresholdAShiftGoesOver) {
  const std::vector<DriftSample> base = Normal(2000, 0.0, 1);
  const DriftBaseline b = BuildBaseline(base);
  const auto& expected = b[DriftStat::kMeanEntropy].counts;
  // Fresh samples of the same distribution, 20 windows of 300: all well under 0.25 (the noise
  // floor with 12 bins is about 11 * (1/300 + 1/2000) = 0.04).
  for (uint32_t seed = 2; seed < 22; ++seed) {
    const double psi = PopulationStabilityIndex(expected, CountsIn(b, DriftStat::kMeanEntropy, Normal(300, 0.0, seed)));
    EXPECT_LT(psi, 0.12) << "seed " << seed;
  }
  // A one-sigma shift of the mean: far over.
  const double shifted = PopulationStabilityIndex(expected, CountsIn(b, DriftStat::kMeanEntropy, Normal(300, 1.0, 99)));
  EXPECT_GT(shifted, 0.5);
}

TEST(PopulationStabilityIndex, AtTheDefaultSizesChanceStaysUnderTheThreshold) {
  // min_requests 200 and baseline_requests 1000 (DriftOptions): 200 fresh windows of the same
  // distribution, none over 0.25 (at 100 and 500 about 4% would be).
  const DriftBaseline b = BuildBaseline(Normal(1000, 0.0, 7));
  const auto& expected = b[DriftStat::kMeanEntropy].counts;
  int over = 0;
  double sum = 0;
  for (uint32_t seed = 100; seed < 300; ++seed) {
    const double psi = PopulationStabilityIndex(expected, CountsIn(b, DriftStat::kMeanEntropy, Normal(200, 0.0, seed)));
    over += psi > 0.25;
    sum += psi;
  }
  EXPECT_EQ(over, 0);
  EXPECT_LT(sum / 200, 0.1);  // the noise floor, ~11 x (1/200 + 1/1000) = 0.066
}

TEST(RollingBinCounts, CountsTheWindowAndForgetsWhatLeftIt) {
  std::vector<DriftSample> base(20);
  for (auto& s : base) s[DriftStat::kTrustFlagged] = 0;
  const DriftBaseline b = BuildBaseline(base);
  RollingBinCounts w(600, b);  // 10 minutes in 10 s slices
  std::array<int, kDriftStats> flagged{};
  flagged.fill(-1);
  flagged[size_t(DriftStat::kTrustFlagged)] = 1;
  std::array<int, kDriftStats> plain = flagged;
  plain[size_t(DriftStat::kTrustFlagged)] = 0;
  const double t0 = 100000;
  w.Add(t0, flagged);
  w.Add(t0 + 5, plain);
  w.Add(t0 + 300, plain);
  EXPECT_EQ(w.Requests(t0 + 300), 3);
  EXPECT_EQ(w.Counts(t0 + 300, DriftStat::kTrustFlagged), (std::vector<double>{2, 1}));
  EXPECT_EQ(w.Counts(t0 + 300, DriftStat::kMeanEntropy), std::vector<double>{});  // no bins
  // 11 minutes on: the first two left, the third is still in.
  EXPECT_EQ(w.Requests(t0 + 660), 1);
  EXPECT_EQ(w.Counts(t0 + 660, DriftStat::kTrustFlagged), (std::vector<double>{1, 0}));
  // A slice reused after a full turn starts from zero.
  w.Add(t0 + 1300, flagged);
  EXPECT_EQ(w.Requests(t0 + 1300), 1);
  EXPECT_EQ(w.Counts(t0 + 1300, DriftStat::kTrustFlagged), (std::vector<double>{0, 1}));
  EXPECT_EQ(w.Requests(t0 + 5000), 0);
}

TEST(DriftBaselineFile, RoundTrips) {
  std::vector<DriftSample> samples = Normal(500, 2.0, 3);
  for (size_t i = 0; i < samples.size(); ++i) samples[i][DriftStat::kFinishReason] = double(i % 2);
  const DriftBaseline b = BuildBaseline(samples);
  const std::string text = BaselineToJson(b, {{"model", "m"}, {"model_hash", "ab"}});
  const json j = json::parse(text);
  EXPECT_EQ(j["model"], "m");
  auto back = BaselineFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->requests, 500);
  for (int i = 0; i < kDriftStats; ++i) {
    EXPECT_EQ(back->stats[size_t(i)].edges, b.stats[size_t(i)].edges) << i;
    EXPECT_EQ(back->stats[size_t(i)].counts, b.stats[size_t(i)].counts) << i;
  }
}

TEST(DriftBaselineFile, RefusesHostileFiles) {
  const json good = json::parse(BaselineToJson(BuildBaseline(Normal(100, 0, 4)), json::object()));
  ASSERT_TRUE(BaselineFromJson(good).ok());
  auto refused = [](json j, const std::string& why) {
    auto r = BaselineFromJson(j);
    EXPECT_FALSE(r.ok()) << j.dump();
    if (!r.ok()) EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused(json::array(), "object");
  refused(nullptr, "object");
  json j = good;
  j["format"] = "other";
  refused(j, "format");
  j = good;
  j["format_version"] = 2;
  refused(j, "format_version");
  j = good;
  j["requests"] = -1;
  refused(j, "requests");
  j = good;
  j.erase("stats");
  refused(j, "stats");
  j = good;
  j["stats"]["no_such_stat"] = j["stats"]["mean_entropy"];
  refused(j, "unknown statistic");
  j = good;
  j["stats"]["mean_entropy"]["edges"] = {1.0, 1.0};
  refused(j, "increase");
  j = good;
  j["stats"]["mean_entropy"]["edges"] = {1.0, "x"};
  refused(j, "finite");
  j = good;
  j["stats"]["mean_entropy"]["counts"].push_back(1);
  refused(j, "bins");
  j = good;
  j["stats"]["mean_entropy"]["counts"][0] = -1;
  refused(j, "0 to 1e12");
  j = good;
  j["stats"]["mean_entropy"]["counts"][0] = 1e308;  // sums would overflow
  refused(j, "0 to 1e12");
  j = good;
  for (auto& c : j["stats"]["mean_entropy"]["counts"]) c = 0;
  refused(j, "all zero");
  j = good;
  j["stats"]["finish_reason"] = {{"edges", {1.0}}, {"counts", {1, 1}}};
  refused(j, "category");
  j = good;
  j["stats"]["trust_flagged"] = {{"edges", json::array()}, {"counts", {1, 1, 1}}};
  refused(j, "2 bins");
  j = good;
  j["stats"]["mean_entropy"] = "x";
  refused(j, "expected");
}

TEST(DriftBaselineFile, TheFuzzSeedsAreAcceptedBaselines) {
  // tests/fuzz/corpus/drift_baseline: seeds that reach past the parser's checks.
  for (const char* seed : {"full.json", "categorical.json", "empty_stats.json"}) {
    const std::vector<uint8_t> bytes =
        vlmd::testing::ReadFileBytes(vlmd::testing::SourcePath(std::string("tests/fuzz/corpus/drift_baseline/") + seed));
    auto b = BaselineFromJson(json::parse(std::string(bytes.begin(), bytes.end())));
    EXPECT_TRUE(b.ok()) << seed << ": " << b.status().ToString();
  }
}

}  // namespace
}  // namespace vlmd::serve::policy
