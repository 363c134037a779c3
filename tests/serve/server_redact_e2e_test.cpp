// Redaction before inference over real HTTP (issue 23 part 1): the reply, the audit line and the
// metrics say what was covered; the encoder saw the covered image (the model answers as for the
// same image covered beforehand, and unlike for the original); with "fill" two photos that
// differ only inside the face share one visual-embedding cache entry (when the detector frames
// the face alike); a model's or route's setting replaces the server's.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "serve/api/requests.h"
#include "serve/config/config.h"
#include "serve/redact/redactor.h"
#include "server_harness.h"
#include "server_test_servers.h"

namespace vlmd::serve {
namespace {

std::string AstronautJpeg() { return testing::ReadText(vlmd::testing::SourcePath("tests/data/redact/astronaut.jpg")); }

engine::image::Image Decoded(const std::string& bytes) {
  auto img = engine::image::DecodeImage({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  EXPECT_TRUE(img.ok());
  return img.ok() ? std::move(*img) : engine::image::Image{};
}

// Lossless: the server decodes these bytes to exactly `img`.
std::string Ppm(const engine::image::Image& img) {
  return "P6\n" + std::to_string(img.width) + " " + std::to_string(img.height) + "\n255\n" +
         std::string(img.rgb.begin(), img.rgb.end());
}

json Invoke(httplib::Client& c, const std::string& image) {
  const json req{{"prompt", "Who is in the picture?"},
                 {"max_tokens", 4},
                 {"logprobs", true},
                 {"image_base64", api::EncodeBase64(image)}};
  auto r = c.Post("/v1/vlm/invoke", req.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body, nullptr, false);
}

TEST(ServerRedact, TheEncoderSeesTheCoveredFaceAndTheReplyAuditAndMetricsSaySo) {
  TempDir dir;
  ServerOptions o;
  o.redact.faces = true;
  o.redact.plates = true;
  o.guard.audit_path = dir.Path("audit.jsonl");
  auto redacting = StartServer(o);
  auto c = ClientOf(*redacting);
  const std::string jpeg = AstronautJpeg();
  const json covered = Invoke(*c, jpeg);
  ASSERT_TRUE(covered.contains("redaction")) << covered.dump();
  EXPECT_GE(covered["redaction"]["faces"].get<int>(), 1);
  EXPECT_EQ(covered["redaction"]["plates"], 0);
  EXPECT_GE(covered["timings"]["redact_ms"].get<double>(), 0.0);
  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_redactions_total{kind=\"faces\"}"),
            covered["redaction"]["faces"].get<double>());
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_redact_duration_seconds_count"), 1);
  const std::string audit = testing::ReadText(dir.Path("audit.jsonl"));
  const json line = json::parse(audit.substr(0, audit.find('\n')));
  EXPECT_EQ(line["redaction"], covered["redaction"]);
  // A text-only request says nothing was covered.
  const json text_only = json::parse(
      c->Post("/v1/vlm/invoke", json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump(), "application/json")->body);
  EXPECT_EQ(text_only["redaction"], json({{"faces", 0}, {"plates", 0}}));

  // The same photo covered beforehand, through a server without redaction: the same answer to
  // the last bit of every logprob; the original photo gets another one.
  auto plain = StartServer(ServerOptions{});
  auto pc = ClientOf(*plain);
  engine::image::Image pre = Decoded(jpeg);
  auto redactor = redact::Redactor::Create(o.redact);
  ASSERT_TRUE(redactor.ok());
  ASSERT_TRUE((*redactor)->Apply(&pre).ok());
  const json precovered = Invoke(*pc, Ppm(pre));
  EXPECT_FALSE(precovered.contains("redaction"));
  EXPECT_EQ(precovered["text"], covered["text"]);
  EXPECT_EQ(precovered["logprobs"], covered["logprobs"]);
  const json original = Invoke(*pc, jpeg);
  EXPECT_NE(original["logprobs"], covered["logprobs"]);
}

TEST(ServerRedact, WithFillPhotosDifferingOnlyInTheFaceShareACacheEntry) {
  ServerOptions o;
  o.redact.faces = true;
  o.redact.style = redact::RedactStyle::kFill;
  // HOG frames this face identically in both photos (the Haar cascade's box moves by a pixel
  // with the touched pixels, and then the covered images differ at its edge).
  o.redact.face_detector = redact::FaceDetector::kHog;
  // The second answer recomputes its whole prompt (no K/V prefix reuse): what is compared is the
  // image cache. (With reuse, a clang build's fast precision computes the last prompt row alone
  // with different low bits than within the whole prompt: logprobs ~1e-3 apart, the same tokens.
  // gcc's are equal. Seen in CI's ASan build; left for the engine, see the session 27 note.)
  ModelSpec spec = FixtureSpec("tiny-smolvlm");
  spec.scheduler.min_prefix_rows = 1 << 30;
  auto server = StartServer(o, {spec});
  auto c = ClientOf(*server);
  const engine::image::Image photo = Decoded(AstronautJpeg());
  engine::image::Image touched = photo;
  // A few pixels in the middle of the face, a little brighter.
  for (int y = 105; y < 115; ++y) {
    for (int x = 220; x < 230; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        uint8_t& v = touched.rgb[(size_t(y) * touched.width + x) * 3 + ch];
        v = uint8_t(std::min(255, v + 6));
      }
    }
  }
  const json first = Invoke(*c, Ppm(photo));
  const json second = Invoke(*c, Ppm(touched));
  EXPECT_EQ(first["cache"]["image"], "miss");
  EXPECT_EQ(second["cache"]["image"], "hit");
  EXPECT_EQ(second["logprobs"], first["logprobs"]);
}

// With one redaction slot and no wait, photos sent at once (each takes the detector ~0.3 s) are
// either redacted (200) or turned away with 429 redaction_busy and Retry-After, and a text-only
// request never needs the slot. (How many hold a slot at once: ConcurrencyLimit's tests.)
TEST(ServerRedact, ConcurrentRedactionsBeyondTheLimitGet429WithRetryAfter) {
  ServerOptions o;
  o.redact.faces = true;
  o.max_concurrent_redactions = 1;
  o.redaction_wait = std::chrono::milliseconds(0);
  auto server = StartServer(o);
  const std::string body = json{{"prompt", "Who?"},
                                {"max_tokens", 1},
                                {"image_base64", api::EncodeBase64(AstronautJpeg())}}
                               .dump();
  int ok = 0, busy = 0;
  for (int round = 0; round < 3 && busy == 0; ++round) {
    constexpr int kRequests = 6;
    std::vector<std::thread> clients;
    std::mutex mu;
    for (int i = 0; i < kRequests; ++i) {
      clients.emplace_back([&] {
        auto c = ClientOf(*server);
        auto r = c->Post("/v1/vlm/invoke", body, "application/json");
        std::lock_guard lock(mu);
        ASSERT_TRUE(r);
        if (r->status == 200) {
          ++ok;
          return;
        }
        EXPECT_EQ(r->status, 429) << r->body;
        EXPECT_EQ(r->get_header_value("Retry-After"), "1");
        const json error = json::parse(r->body, nullptr, false);  // (a throw here would abort)
        EXPECT_TRUE(error.is_object() && error.contains("error") &&
                    error["error"].value("code", "") == "redaction_busy")
            << r->body;
        ++busy;
      });
    }
    for (auto& t : clients) t.join();
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1) << "six photos at once never found the single slot taken";
  auto c = ClientOf(*server);
  auto text = c->Post("/v1/vlm/invoke", json{{"prompt", "Hi"}, {"max_tokens", 1}}.dump(),
                      "application/json");
  ASSERT_TRUE(text);
  EXPECT_EQ(text->status, 200);
}

// Each setting's detectors load once, by the server: the config check only looks for the
// files (a cascade that exists but does not load passes it, and then stops the server's start),
// and a route's own setting loads when the routes are set, not at its first request.
TEST(ServerRedact, DetectorsLoadAtStartAndRouteSettingsWhenRoutesAreSet) {
  TempDir dir;
  dir.Write("haarcascade_russian_plate_number.xml", "not a cascade");
  const json redact{{"kinds", {"plates"}}, {"cascade_dir", dir.Path("")}};
  const std::string config = json{{"policies", {{"redact", redact}}}}.dump();
  auto parsed = ParseConfig(config, dir.Path(""), {});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();  // the file is there: not loaded yet
  EXPECT_EQ(Server(parsed->server).Start().code(), StatusCode::kUnavailable);

  auto server = StartServer(ServerOptions{});
  RouteConfig broken = SplitRoute("broken", {{"tiny-smolvlm", 1}});
  broken.redact = redact::RedactOptions{};
  broken.redact->plates = true;
  broken.redact->cascade_dir = dir.Path("");
  const Status refused = server->SetRoutes({broken}, "tiny-smolvlm");
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.ToString();
  EXPECT_FALSE(server->router().GetRoute("broken"));  // routes unchanged
  RouteConfig plates = broken;
  plates.name = "plates";
  plates.redact->cascade_dir = redact::RedactOptions{}.cascade_dir;
  ASSERT_TRUE(server->SetRoutes({plates}, "tiny-smolvlm").ok());
  EXPECT_TRUE(server->router().GetRoute("plates"));
}

// A model's setting replaces the server's (off included); a route's adds to the model's.
TEST(ServerRedact, AModelOrRouteSettingReplacesTheServers) {
  ServerOptions o;
  o.redact.faces = true;
  const ModelSpec covered = testing::FixtureSpec("covered");
  ModelSpec open = testing::FixtureSpec("open");
  open.redact = redact::RedactOptions{};  // this model: off
  auto server = StartServer(o, {covered, open});
  auto c = ClientOf(*server);
  auto ask = [&](const std::string& model) {
    const json req{{"model", model}, {"prompt", "Who?"}, {"max_tokens", 2},
                   {"image_base64", api::EncodeBase64(AstronautJpeg())}};
    return json::parse(c->Post("/v1/vlm/invoke", req.dump(), "application/json")->body);
  };
  EXPECT_GE(ask("covered")["redaction"]["faces"].get<int>(), 1);
  EXPECT_FALSE(ask("open").contains("redaction"));
  // A route in front of the open model that redacts plates only.
  RouteConfig route = SplitRoute("plates-only", {{"open", 1}});
  route.redact = redact::RedactOptions{};
  route.redact->plates = true;
  // A route adds to the model's setting and cannot take it away: one that turns redaction off
  // in front of the covered model still has its faces covered (the route turned them off for
  // every client that named it), and so does one that adds plates with a threshold no
  // detection passes (its threshold replaced the model's, faces included).
  RouteConfig off = SplitRoute("off", {{"covered", 1}});
  off.redact = redact::RedactOptions{};
  RouteConfig more = SplitRoute("more", {{"covered", 1}});
  more.redact = route.redact;
  more.redact->min_score = 1e9;
  server->router().SetRoutes({route, off, more}, "covered");
  const json via_route = ask("plates-only");
  EXPECT_EQ(via_route["redaction"], json({{"faces", 0}, {"plates", 0}}));
  EXPECT_GE(ask("off")["redaction"]["faces"].get<int>(), 1);
  const json both = ask("more");
  EXPECT_GE(both["redaction"]["faces"].get<int>(), 1);
  EXPECT_TRUE(both["redaction"].contains("plates"));
}

}  // namespace
}  // namespace vlmd::serve
