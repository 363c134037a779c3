// Drift alarms over real HTTP (issue 23 part 3): a served model's first replies form the
// baseline, the same traffic mix again raises nothing, a changed image distribution (image
// requests giving way to text-only ones) raises the alarm in /metrics, /admin/models and the
// webhook; the admin action takes a new baseline and writes its file.
#include <gtest/gtest.h>

#include <filesystem>

#include "prometheus_lint.h"
#include "serve/api/requests.h"
#include "server_harness.h"
#include "server_test_servers.h"
#include "webhook_receiver.h"

namespace vlmd::serve {
namespace {

const std::string kAdminKey = "admin-key-0123456789abcdef";

json ChatWithInlineImage(const std::string& text, const std::string& png) {
  return {{"max_tokens", 4},
          {"messages",
           {{{"role", "user"},
             {"content",
              {{{"type", "text"}, {"text", text}},
               {{"type", "image_url"},
                {"image_url", {{"url", "data:image/png;base64," + api::EncodeBase64(png)}}}}}}}}}};
}

TEST(ServerDrift, UnchangedTrafficIsQuietAChangedImageMixRaisesTheAlarm) {
  TempDir dir;
  testing::WebhookReceiver hook;
  ServerOptions o;
  o.guard.admin_key = kAdminKey;
  o.drift.enabled = true;
  o.drift.windows = {{"1h", 3600}};
  o.drift.baseline_requests = 18;
  o.drift.min_requests = 12;
  o.drift.baseline_dir = dir.Path("drift");
  o.drift.webhook_url = hook.Url();
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  const std::string png = testing::FixtureImage("img-50x100.png");
  auto chat = [&](const json& body) {
    auto r = c->Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  };
  // The traffic mix: two image prompts and one text prompt, greedy.
  auto mix = [&](int rounds) {
    for (int i = 0; i < rounds; ++i) {
      chat(ChatWithInlineImage("Describe this:", png));
      chat(ChatWithInlineImage("What is in the picture?", png));
      chat(ChatRequest("Hello there", 4));
    }
  };
  auto admin_models = [&] {
    auto r = c->Get("/admin/models", Bearer(kAdminKey));
    EXPECT_EQ(r->status, 200);
    return json::parse(r->body)["models"][0];
  };
  mix(6);  // 18 replies: the baseline
  json model = admin_models();
  const std::string name = model["name"], version = model["version"];
  EXPECT_EQ(model["drift"]["baseline"]["source"], "first_requests");
  EXPECT_EQ(model["drift"]["baseline"]["requests"], 18);
  const std::string labels = "model=\"" + name + "\",version=\"" + version + "\"";
  auto score = [&](const std::string& stat) {
    return testing::MetricValue(c->Get("/metrics")->body,
                                "vlm_drift_score{" + labels + ",stat=\"" + stat + "\",window=\"1h\"}");
  };
  EXPECT_TRUE(std::isnan(score("visual_tokens")));  // no reply in the window yet

  mix(6);  // the same mix: scored (12 image replies show an embedding norm), nothing moved
  model = admin_models();
  EXPECT_EQ(model["drift"]["windows"][0]["requests"], 18);
  EXPECT_TRUE(model["drift"]["windows"][0]["alarms"].empty()) << model.dump();
  for (const char* stat : {"visual_tokens", "embedding_norm", "reply_tokens", "mean_entropy", "finish_reason"}) {
    EXPECT_NEAR(score(stat), 0.0, 1e-9) << stat;
  }
  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(LintPrometheusText(metrics), "");
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_drift_baseline_requests{" + labels + "}"), 18);

  // The image mix changes: text-only requests only.
  for (int i = 0; i < 18; ++i) chat(ChatRequest("Hello there", 4));
  EXPECT_GT(score("visual_tokens"), 0.25);
  model = admin_models();
  EXPECT_NE(model["drift"]["windows"][0]["alarms"].dump().find("visual_tokens"), std::string::npos)
      << model.dump();
  EXPECT_EQ(testing::MetricValue(c->Get("/metrics")->body,
                                 "vlm_drift_alarms_total{" + labels + ",stat=\"visual_tokens\",window=\"1h\"}"),
            1);
  const auto events = hook.WaitUntil([](const std::vector<json>& got) {
    for (const json& e : got) {
      if (e["event"] == "drift_alarm" && e["stat"] == "visual_tokens") return true;
    }
    return false;
  });
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["model"], name);
  EXPECT_EQ(events[0]["version"], version);

  // The change was intended: the recent replies become the baseline, written to a file.
  EXPECT_EQ(c->Post("/admin/models/" + name + "/baseline", "", "application/json")->status, 401);
  EXPECT_EQ(c->Post("/admin/models/nope/baseline", Bearer(kAdminKey), "", "application/json")->status, 404);
  auto taken = c->Post("/admin/models/" + name + "/baseline", Bearer(kAdminKey), "", "application/json");
  ASSERT_EQ(taken->status, 200) << taken->body;
  const json baseline = json::parse(taken->body)["baseline"];
  EXPECT_EQ(baseline["baseline_requests"], 18);  // the latest 18: text-only
  ASSERT_TRUE(baseline.contains("file"));
  EXPECT_TRUE(std::filesystem::exists(baseline["file"].get<std::string>()));
  model = admin_models();
  EXPECT_EQ(model["drift"]["baseline"]["source"], "admin");
  EXPECT_TRUE(model["drift"]["windows"][0]["alarms"].empty());
  // The new traffic goes on: no alarm against the new baseline.
  for (int i = 0; i < 12; ++i) chat(ChatRequest("Hello there", 4));
  model = admin_models();
  EXPECT_EQ(model["drift"]["windows"][0]["requests"], 12);
  EXPECT_TRUE(model["drift"]["windows"][0]["alarms"].empty()) << model.dump();
  EXPECT_LT(score("visual_tokens"), 0.05);  // equal shares (smoothing differs with the counts)
  // The webhook heard the alarm clear when the new baseline came.
  const auto cleared = hook.WaitUntil([](const std::vector<json>& got) {
    for (const json& e : got) {
      if (e["event"] == "drift_cleared" && e["reason"] == "new_baseline") return true;
    }
    return false;
  });
  bool heard = false;
  for (const json& e : cleared) heard |= e["event"] == "drift_cleared" && e.value("reason", "") == "new_baseline";
  EXPECT_TRUE(heard);
}

TEST(ServerDrift, OffByDefault) {
  ServerOptions o;
  o.guard.admin_key = kAdminKey;
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  ASSERT_EQ(c->Post("/v1/chat/completions", ChatRequest("Hello", 2).dump(), "application/json")->status, 200);
  EXPECT_EQ(c->Get("/metrics")->body.find("vlm_drift_score{"), std::string::npos);
  const json model = json::parse(c->Get("/admin/models", Bearer(kAdminKey))->body)["models"][0];
  EXPECT_FALSE(model.contains("drift"));
  auto r = c->Post("/admin/models/" + model["name"].get<std::string>() + "/baseline", Bearer(kAdminKey), "",
                   "application/json");
  EXPECT_EQ(r->status, 409);
  EXPECT_NE(r->body.find("drift alarms are off"), std::string::npos);
}

}  // namespace
}  // namespace vlmd::serve
