// Gemma 3 through every server path over real HTTP (tiny-gemma3): the answer equals the engine's
// own with prompts prefilled in chunks smaller than the image (its rows attend both ways, so a
// chunk takes all of it), a repeated image is a cache hit and a repeated prompt is reused (whole
// images only), the fixed-size encoder cannot shrink (422 under a budget it does not fit),
// streams carry earlier frames, and the OpenAI endpoint takes image_url with the Gemma
// template.
#include <gtest/gtest.h>

#include "engine/runtime/vlm_engine.h"
#include "fixture_json.h"
#include "serve/api/requests.h"
#include "server_harness.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;
using testing::FixtureImage;
using testing::Harness;
using testing::HarnessOptions;

constexpr const char* kFixture = "tiny-gemma3";

json Post(httplib::Client& c, const std::string& path, const json& req) {
  auto r = c.Post(path, req.dump(), "application/json");
  if (!r) return {{"http", -1}};
  json j = json::parse(r->body, nullptr, false);
  j["http"] = r->status;
  return j;
}

HarnessOptions Gemma3Options() {
  HarnessOptions o;
  o.fixture = kFixture;
  o.scheduler.prefill_chunk = 3;  // smaller than an image (16 rows): a chunk takes it whole
  return o;
}

// The golden case's raw prompt and image, answered by the server and by the engine directly.
TEST(ServerGemma3, InvokeAnswersAsTheEngineAndRepeatsHitTheCaches) {
  std::string error;
  const json golden = vlmd::testing::ReadFixtureJson(std::string(kFixture) + "/golden.json", &error);
  ASSERT_TRUE(error.empty()) << error;
  const json* gc = nullptr;
  for (const json& x : golden["cases"]) {
    if (x["name"] == "img-96x64") gc = &x;
  }
  ASSERT_NE(gc, nullptr);
  const std::string image = FixtureImage("img-96x64.png", kFixture);

  engine::runtime::EngineOptions eo;
  eo.threads = 2;
  eo.n_ctx = 512;
  eo.mmproj_path = vlmd::testing::FixturePath(std::string(kFixture) + "/mmproj.gguf");
  auto engine = engine::runtime::VlmEngine::Load(
      vlmd::testing::FixturePath(std::string(kFixture) + "/text.gguf"), eo);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  engine::runtime::ImageTimings t;
  auto encoded = (*engine)->EncodeImage(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(image.data()), image.size()), &t);
  ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
  auto rows = (*engine)->BuildPrompt((*gc)["prompt"].get<std::string>(),
                                     std::span<const engine::runtime::EncodedImage>(&*encoded, 1), true);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  engine::runtime::GenerateParams p;
  p.max_tokens = 12;
  auto direct = (*engine)->Generate(*rows, p);
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();

  Harness h(Gemma3Options());
  auto c = h.Client();
  json req{{"prompt", (*gc)["prompt"]},
           {"raw_prompt", true},
           {"max_tokens", 12},
           {"image_base64", api::EncodeBase64(image)}};
  const json a = Post(*c, "/v1/vlm/invoke", req);
  ASSERT_EQ(a["http"], 200) << a.dump();
  EXPECT_EQ(a["text"], direct->text);
  EXPECT_EQ(a["usage"]["prompt_tokens"], (*gc)["n_prompt_tokens"]);

  // The same request again: the image from the cache, every prompt row but the last reused.
  const json b = Post(*c, "/v1/vlm/invoke", req);
  ASSERT_EQ(b["http"], 200) << b.dump();
  EXPECT_EQ(b["text"], a["text"]);
  EXPECT_EQ(b["cache"]["image"], "hit") << b.dump();
  EXPECT_EQ(b["usage"]["reused_prompt_tokens"], a["usage"]["prompt_tokens"].get<int>() - 1);

  // The OpenAI endpoint with the image as a data URI.
  const std::string uri = "data:image/png;base64," + api::EncodeBase64(image);
  json chat{{"max_tokens", 4},
            {"messages",
             {{{"role", "user"},
               {"content",
                {{{"type", "image_url"}, {"image_url", {{"url", uri}}}},
                 {{"type", "text"}, {"text", "What is this?"}}}}}}}};
  const json o = Post(*c, "/v1/chat/completions", chat);
  ASSERT_EQ(o["http"], 200) << o.dump();
  EXPECT_EQ(o["choices"][0]["finish_reason"], "length");
}

TEST(ServerGemma3, AFixedSizeImageCannotShrink) {
  HarnessOptions o = Gemma3Options();
  json req{{"prompt", "hi"}, {"max_tokens", 2},
           {"image_base64", api::EncodeBase64(FixtureImage("img-96x64.png", kFixture))}};
  Harness full(o);
  const json a = Post(*full.Client(), "/v1/vlm/invoke", req);
  ASSERT_EQ(a["http"], 200) << a.dump();
  EXPECT_EQ(a["usage"]["image_tokens"], 16) << a.dump();
  // A budget below the prompt: the 4x4-pooled image has one size only.
  o.server.prepare.token_budget = a["usage"]["prompt_tokens"].get<int>() - 1;
  Harness small(o);
  const json b = Post(*small.Client(), "/v1/vlm/invoke", req);
  EXPECT_EQ(b["http"], 422) << b.dump();
}

using testing::SplitFrame;

TEST(ServerGemma3, StreamFramesJoinTheNextRequest) {
  HarnessOptions o = Gemma3Options();
  o.server.streams.max_frames = 3;
  Harness h(o);
  auto c = h.Client();
  json first{{"prompt", "What changed?"}, {"max_tokens", 3}, {"stream_id", "cam-g"},
             {"image_base64", api::EncodeBase64(SplitFrame(8))}};
  const json a = Post(*c, "/v1/vlm/invoke", first);
  ASSERT_EQ(a["http"], 200) << a.dump();
  json second = first;
  second["image_base64"] = api::EncodeBase64(SplitFrame(56));  // most of the picture changed
  const json b = Post(*c, "/v1/vlm/invoke", second);
  ASSERT_EQ(b["http"], 200) << b.dump();
  EXPECT_GE(b["stream"]["context_frames"].get<int>(), 1) << b.dump();
  // The earlier frame's rows (16, and its <start_of_image> / <end_of_image>) are in the prompt.
  EXPECT_GE(b["usage"]["prompt_tokens"].get<int>(), a["usage"]["prompt_tokens"].get<int>() + 16);
}

}  // namespace
}  // namespace vlmd::serve
