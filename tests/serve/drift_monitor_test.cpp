// Drift alarms per model version (serve/http/drift_monitor.h) on a test clock: the baseline from
// the first replies, no alarm on unchanged traffic, an alarm (metric, counter, webhook with a
// retry) on a shift such as a raised sampling temperature, its clearing, version hand-over and
// baseline files.
#include "serve/http/drift_monitor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "server_test_servers.h"
#include "webhook_receiver.h"

namespace vlmd::serve {
namespace {

using policy::DriftSample;
using policy::DriftStat;

// Replies whose mean token entropy is N(mean, 0.3) and that mostly stop: a sampling temperature
// raised shows as a higher entropy and more replies cut at max_tokens.
std::vector<DriftSample> Replies(int n, double entropy_mean, double length_share, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> entropy(entropy_mean, 0.3);
  std::bernoulli_distribution length(length_share);
  std::vector<DriftSample> out(static_cast<size_t>(n));
  for (DriftSample& s : out) {
    s[DriftStat::kMeanEntropy] = entropy(rng);
    s[DriftStat::kFinishReason] = length(rng) ? 1 : 0;
    s[DriftStat::kTrustFlagged] = 0;
    s[DriftStat::kVisualTokens] = 64;
  }
  return out;
}

struct Monitored {
  explicit Monitored(DriftOptions o) {
    auto m = DriftMonitor::Create(std::move(o), &metrics, [this] { return now; });
    if (!m.ok()) throw std::runtime_error(m.status().ToString());
    monitor = std::move(*m);
  }
  void Record(const std::vector<DriftSample>& replies, const std::string& hash = "h1") {
    for (const DriftSample& s : replies) {
      monitor->Record("m", hash, s);
      now += 0.5;
    }
  }
  double Metric(const std::string& series) { return testing::MetricValue(registry.Render(), series); }
  double Score(const std::string& stat) {
    return Metric("vlm_drift_score{model=\"m\",version=\"v1\",stat=\"" + stat + "\",window=\"10m\"}");
  }

  obs::Registry registry;
  ServerMetrics metrics{&registry};
  double now = 1000;
  std::unique_ptr<DriftMonitor> monitor;
};

DriftOptions Options() {
  DriftOptions o;
  o.enabled = true;
  o.windows = {{"10m", 600}};
  o.baseline_requests = 300;
  o.min_requests = 100;
  o.threshold = 0.25;
  return o;
}

TEST(DriftMonitor, UnchangedTrafficRaisesNothingAShiftRaisesAnAlarmThatClears) {
  testing::WebhookReceiver hook(/*fail_first=*/1);  // the first post fails: retried
  DriftOptions o = Options();
  o.webhook_url = hook.Url();
  o.webhook_retries = 2;
  Monitored m(o);
  m.monitor->Track("m", "v1", "h1");
  EXPECT_EQ(m.monitor->Describe("m")["baseline"]["needed"], 300);
  m.Record(Replies(300, 2.0, 0.1, 1));
  EXPECT_EQ(m.monitor->Describe("m")["baseline"]["source"], "first_requests");
  EXPECT_EQ(m.Metric("vlm_drift_baseline_requests{model=\"m\",version=\"v1\"}"), 300);

  // Unchanged traffic: scored (after min_requests), never over the threshold.
  m.Record(Replies(99, 2.0, 0.1, 2));
  EXPECT_TRUE(std::isnan(m.Score("mean_entropy")));  // 99 < min_requests
  m.Record(Replies(101, 2.0, 0.1, 3));
  EXPECT_LT(m.Score("mean_entropy"), 0.1);
  EXPECT_LT(m.Score("finish_reason"), 0.1);
  EXPECT_LT(m.Score("visual_tokens"), 0.01);  // equal shares, unequal smoothing
  EXPECT_TRUE(std::isnan(m.Score("embedding_norm")));  // never shown: no bins
  EXPECT_TRUE(m.monitor->Describe("m")["windows"][0]["alarms"].empty());

  // A raised temperature: entropy up by one bit and half the replies cut at max_tokens.
  m.now += 700;  // the unchanged replies leave the window
  m.Record(Replies(200, 3.0, 0.5, 4));
  EXPECT_GT(m.Score("mean_entropy"), 1.0);
  EXPECT_GT(m.Score("finish_reason"), 0.25);
  EXPECT_LT(m.Score("visual_tokens"), 0.1);
  const nlohmann::json alarms = m.monitor->Describe("m")["windows"][0]["alarms"];
  EXPECT_EQ(alarms, nlohmann::json({"mean_entropy", "finish_reason"}));
  EXPECT_EQ(m.Metric("vlm_drift_alarms_total{model=\"m\",version=\"v1\",stat=\"mean_entropy\",window=\"10m\"}"), 1);
  auto events = hook.WaitFor(2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["event"], "drift_alarm");
  EXPECT_EQ(events[0]["model"], "m");
  EXPECT_EQ(events[0]["version"], "v1");
  EXPECT_EQ(events[0]["model_hash"], "h1");
  EXPECT_EQ(events[0]["window"], "10m");
  EXPECT_GT(events[0]["score"].get<double>(), 0.25);
  EXPECT_EQ(events[0]["baseline_requests"], 300);
  EXPECT_EQ(hook.posts(), 3);  // one failure, retried

  // The window empties: not scored, the alarm holds; unchanged traffic again clears it.
  m.now += 700;
  m.monitor->Refresh();
  EXPECT_TRUE(std::isnan(m.Score("mean_entropy")));
  EXPECT_EQ(m.monitor->Describe("m")["windows"][0]["alarms"].size(), 2u);
  m.Record(Replies(150, 2.0, 0.1, 5));
  EXPECT_TRUE(m.monitor->Describe("m")["windows"][0]["alarms"].empty());
  events = hook.WaitFor(4);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2]["event"], "drift_cleared");
  EXPECT_EQ(events[3]["event"], "drift_cleared");
  EXPECT_EQ(m.Metric("vlm_drift_alarms_total{model=\"m\",version=\"v1\",stat=\"mean_entropy\",window=\"10m\"}"), 1);
  for (int i = 0; i < 100 && m.Metric("vlm_drift_webhook_events_total{result=\"sent\"}") < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(m.Metric("vlm_drift_webhook_events_total{result=\"sent\"}"), 4);
}

// Replies showing only the trust flag, `flagged` of `n` flagged.
std::vector<DriftSample> Flagged(int n, int flagged) {
  std::vector<DriftSample> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)][DriftStat::kTrustFlagged] = i < flagged ? 1.0 : 0.0;
  return out;
}

TEST(DriftMonitor, AnAlarmClearsOnlyWellUnderTheThreshold) {
  Monitored m(Options());
  m.monitor->Track("m", "v1", "h1");
  m.Record(Flagged(300, 30));  // 10% flagged
  const std::string alarms =
      "vlm_drift_alarms_total{model=\"m\",version=\"v1\",stat=\"trust_flagged\",window=\"10m\"}";
  EXPECT_EQ(m.Metric(alarms), 0);  // the series exists before its first alarm
  auto alarmed = [&] { return !m.monitor->Describe("m")["windows"][0]["alarms"].empty(); };
  m.Record(Flagged(200, 80));  // 40%: PSI ~0.53
  EXPECT_GT(m.Score("trust_flagged"), 0.5);
  EXPECT_TRUE(alarmed());
  m.now += 700;
  m.Record(Flagged(200, 55));  // 27.5%: PSI ~0.21, under 0.25 but over 0.8 x 0.25: still on
  EXPECT_GT(m.Score("trust_flagged"), 0.2);
  EXPECT_LT(m.Score("trust_flagged"), 0.25);
  EXPECT_TRUE(alarmed());
  m.now += 700;
  m.Record(Flagged(200, 20));  // back to 10%
  EXPECT_FALSE(alarmed());
  EXPECT_EQ(m.Metric(alarms), 1);
}

TEST(DriftMonitor, AStatisticFewBaselineRepliesShowedIsNotScored) {
  Monitored m(Options());  // min_requests 100
  m.monitor->Track("m", "v1", "h1");
  std::vector<DriftSample> base = Replies(300, 2.0, 0.1, 1);
  for (int i = 0; i < 20; ++i) base[size_t(i)][DriftStat::kEmbeddingNorm] = 10.0 + 0.1 * i;  // 20 images
  m.Record(base);
  std::vector<DriftSample> images = Replies(200, 2.0, 0.1, 2);
  for (auto& r : images) r[DriftStat::kEmbeddingNorm] = 10.5;
  m.Record(images);
  EXPECT_TRUE(std::isnan(m.Score("embedding_norm")));  // 20 < 100 baseline replies showed it
  EXPECT_LT(m.Score("mean_entropy"), 0.25);            // the others are scored
}

TEST(DriftMonitor, ANewVersionStartsAfreshAndTheOldOnesRepliesAreIgnored) {
  Monitored m(Options());
  m.monitor->Track("m", "v1", "h1");
  m.Record(Replies(400, 2.0, 0.1, 1));
  EXPECT_LT(m.Score("mean_entropy"), 0.25);
  m.monitor->Track("m", "v1", "h1");  // the same version again (a reload of the same files): kept
  EXPECT_EQ(m.monitor->Describe("m")["baseline"]["source"], "first_requests");
  ASSERT_NE(m.registry.Render().find("vlm_drift_baseline_requests{model=\"m\",version=\"v1\"}"),
            std::string::npos);
  m.monitor->Track("m", "v2", "h2");
  // Retired: v1's gauges end (no series of NaN piles up per hot swap); v2's begin.
  const std::string text = m.registry.Render();
  EXPECT_EQ(text.find("vlm_drift_score{model=\"m\",version=\"v1\""), std::string::npos);
  EXPECT_EQ(text.find("vlm_drift_baseline_requests{model=\"m\",version=\"v1\"}"),
            std::string::npos);
  EXPECT_EQ(m.Metric("vlm_drift_baseline_requests{model=\"m\",version=\"v2\"}"), 0);
  m.Record(Replies(10, 2.0, 0.1, 2), "h1");          // late replies of v1
  const nlohmann::json d = m.monitor->Describe("m");
  EXPECT_EQ(d["version"], "v2");
  EXPECT_EQ(d["baseline"]["collected"], 0);
  m.Record(Replies(10, 2.0, 0.1, 3), "h2");
  EXPECT_EQ(m.monitor->Describe("m")["baseline"]["collected"], 10);
  EXPECT_TRUE(m.monitor->Describe("other").is_null());
}

TEST(DriftMonitor, TakenBaselinesAreWrittenAndReadBackForTheSameFilesOnly) {
  TempDir dir;
  DriftOptions o = Options();
  o.baseline_dir = dir.Path("baselines");  // created on first write
  {
    Monitored m(o);
    EXPECT_EQ(m.monitor->TakeBaseline("m").status().code(), StatusCode::kNotFound);
    m.monitor->Track("m", "v1/rc", "h1");
    EXPECT_EQ(m.monitor->TakeBaseline("m").status().code(), StatusCode::kFailedPrecondition);
    m.Record(Replies(40, 2.0, 0.1, 1));  // still collecting (300 needed): taken as it is
    auto taken = m.monitor->TakeBaseline("m");
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();
    EXPECT_EQ((*taken)["baseline_requests"], 40);
    EXPECT_EQ((*taken)["file"], dir.Path("baselines/m@v1_rc.json"));
    EXPECT_EQ(m.monitor->Describe("m")["baseline"]["source"], "admin");
    // From a window: its replies (with the first baseline's bins) become the baseline.
    // Later: the latest replies (all of them, up to baseline_requests) form the next one.
    m.Record(Replies(25, 3.0, 0.5, 2));
    taken = m.monitor->TakeBaseline("m");
    ASSERT_TRUE(taken.ok());
    EXPECT_EQ((*taken)["baseline_requests"], 65);
    EXPECT_EQ(m.monitor->Describe("m")["windows"][0]["requests"], 0);  // windows start afresh
  }
  Monitored again(o);
  again.monitor->Track("m", "v1/rc", "h1");
  EXPECT_EQ(again.monitor->Describe("m")["baseline"]["source"], "file");
  EXPECT_EQ(again.monitor->Describe("m")["baseline"]["requests"], 65);
  // The same label on other files: the file is not theirs.
  Monitored other(o);
  other.monitor->Track("m", "v1/rc", "h-other");
  EXPECT_TRUE(other.monitor->Describe("m")["baseline"]["source"].is_null());
  // A file whose model_hash is not even a string: not theirs either (and no exception).
  {
    nlohmann::json j = nlohmann::json::parse(testing::ReadText(dir.Path("baselines/m@v1_rc.json")));
    j["model_hash"] = 5;
    dir.Write("baselines/m@v1_rc.json", j.dump());
    Monitored odd(o);
    odd.monitor->Track("m", "v1/rc", "h1");
    EXPECT_TRUE(odd.monitor->Describe("m")["baseline"]["source"].is_null());
  }
  // A damaged file: the first replies form the baseline.
  dir.Write("baselines/m@v1_rc.json", "{\"format\": \"vlmd-drift-baseline\", \"stats\": 3");
  Monitored damaged(o);
  damaged.monitor->Track("m", "v1/rc", "h1");
  EXPECT_TRUE(damaged.monitor->Describe("m")["baseline"]["source"].is_null());
}

TEST(DriftMonitor, ABadWebhookUrlIsRefused) {
  DriftOptions o = Options();
  o.webhook_url = "ftp://example.com/hook";
  obs::Registry r;
  ServerMetrics metrics(&r);
  EXPECT_EQ(DriftMonitor::Create(o, &metrics).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vlmd::serve
