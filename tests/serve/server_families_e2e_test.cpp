// The vision families through every server path over real HTTP, one parameterized suite:
// the answer equals the engine's own (images encoded one work unit per scheduler step, prompts
// prefilled in chunks: Gemma 3's chunks smaller than its bidirectional images), a repeated image
// is a cache hit and a repeated prompt is reused, streams carry earlier frames, and the OpenAI
// endpoint takes image_url with each model's template; then each family's token budget: Qwen VL
// shrinks to its next smaller size, LLaVA-1.6 and InternVL pick grids of fewer slices then the overview
// alone, Gemma 3's fixed size cannot shrink (422); a hot swap self-checks each family's
// image path; routes whose models are of different families (complexity tiers, a weighted
// split) answer as each model asked by name; and a synthetic Qwen3-VL MoE (no fixture exists)
// answers concurrent requests as its engine does alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "engine/runtime/vlm_engine.h"
#include "engine/synth/model_presets.h"
#include "engine/synth/synthetic_model.h"
#include "fixture_json.h"
#include "serve/api/requests.h"
#include "server_harness.h"
#include "server_test_servers.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;
using testing::FixtureImage;
using testing::Harness;
using testing::HarnessOptions;
using testing::SplitFrame;

struct Family {
  const char* fixture;
  const char* golden_case;  // its image is images/<golden_case>.png
  int32_t encode_tiles;     // work units encoded per scheduler step
  int32_t prefill_chunk;    // prompt rows per scheduler step
  int min_frame_rows;       // an earlier stream frame's rows in the next prompt, at least
};

const Family kQwen25vl{"tiny-qwen25vl", "img-168x112", 1, 256, 10};  // window attention, M-RoPE
const Family kLlava16{"tiny-llava16", "img-64x48", 1, 256, 80};       // 4 slices + overview
const Family kInternVl{"tiny-internvl", "img-96x64", 1, 256, 32};     // tiles + thumbnail in <img>
const Family kGemma3{"tiny-gemma3", "img-96x64", 1, 3, 16};           // bidirectional images
const Family kQwen3vl{"tiny-qwen3vl", "img-168x112", 1, 256, 10};      // deepstack: wider image rows

json Post(httplib::Client& c, const std::string& path, const json& req) {
  auto r = c.Post(path, req.dump(), "application/json");
  if (!r) return {{"http", -1}};
  json j = json::parse(r->body, nullptr, false);
  j["http"] = r->status;
  return j;
}

HarnessOptions FamilyOptions(const Family& f) {
  HarnessOptions o;
  o.fixture = f.fixture;
  o.scheduler.encode_tiles = f.encode_tiles;
  o.scheduler.prefill_chunk = f.prefill_chunk;
  return o;
}

class ServerFamilyTest : public ::testing::TestWithParam<Family> {};

// The golden case's raw prompt and image, answered by the server and by the engine directly.
TEST_P(ServerFamilyTest, InvokeAnswersAsTheEngineAndRepeatsHitTheCaches) {
  const Family& f = GetParam();
  const std::string fixture = f.fixture;
  std::string error;
  const json golden = vlmd::testing::ReadFixtureJson(fixture + "/golden.json", &error);
  ASSERT_TRUE(error.empty()) << error;
  const json* gc = nullptr;
  for (const json& x : golden["cases"]) {
    if (x["name"] == f.golden_case) gc = &x;
  }
  ASSERT_NE(gc, nullptr);
  const std::string image = FixtureImage(std::string(f.golden_case) + ".png", fixture);

  engine::runtime::EngineOptions eo;
  eo.threads = 2;
  eo.n_ctx = 512;
  eo.mmproj_path = vlmd::testing::FixturePath(fixture + "/mmproj.gguf");
  auto engine = engine::runtime::VlmEngine::Load(
      vlmd::testing::FixturePath(fixture + "/text.gguf"), eo);
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

  Harness h(FamilyOptions(f));
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

TEST_P(ServerFamilyTest, StreamFramesJoinTheNextRequest) {
  const Family& f = GetParam();
  HarnessOptions o = FamilyOptions(f);
  o.server.streams.max_frames = 3;
  Harness h(o);
  auto c = h.Client();
  json first{{"prompt", "What changed?"}, {"max_tokens", 3}, {"stream_id", "cam"},
             {"image_base64", api::EncodeBase64(SplitFrame(8))}};
  const json a = Post(*c, "/v1/vlm/invoke", first);
  ASSERT_EQ(a["http"], 200) << a.dump();
  json second = first;
  second["image_base64"] = api::EncodeBase64(SplitFrame(56));  // most of the picture changed
  const json b = Post(*c, "/v1/vlm/invoke", second);
  ASSERT_EQ(b["http"], 200) << b.dump();
  EXPECT_GE(b["stream"]["context_frames"].get<int>(), 1) << b.dump();
  // The earlier frame's rows are in the prompt.
  EXPECT_GE(b["usage"]["prompt_tokens"].get<int>(), a["usage"]["prompt_tokens"].get<int>() + f.min_frame_rows);
}

// Hot swap: the new version passes its self-check, an image through its own scheduler (each
// family's preprocessing, encoder and prompt), and then serves.
TEST_P(ServerFamilyTest, HotSwapSelfChecksTheImagePath) {
  const Family& f = GetParam();
  Harness h(FamilyOptions(f));
  const Status s = h.server().ReloadModel(f.fixture);
  ASSERT_TRUE(s.ok()) << s.ToString();
  json req{{"prompt", "hi"}, {"max_tokens", 2},
           {"image_base64", api::EncodeBase64(FixtureImage(std::string(f.golden_case) + ".png", f.fixture))}};
  const json a = Post(*h.Client(), "/v1/vlm/invoke", req);
  EXPECT_EQ(a["http"], 200) << a.dump();
}

// Qwen3-VL MoE has no fixture: a synthetic tiny one (4 experts, 2 per token). Two requests sent
// at once (which the scheduler batches into shared decode steps when they overlap; the test
// does not force it) each answer what the engine generates for it alone.
TEST(ServerFamilyMoe, ConcurrentRequestsAnswerAsTheEngineAlone) {
  const auto preset = engine::synth::FindPreset("tiny-qwen3vlmoe");
  ASSERT_TRUE(preset.has_value());
  const std::string dir = ::testing::TempDir() + "/vlmd-moe-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(engine::synth::WriteSyntheticText(*preset, {}, dir + "/text.gguf").ok());
  ASSERT_TRUE(engine::synth::WriteSyntheticMmproj(*preset, {}, dir + "/mmproj.gguf").ok());
  const std::string image = FixtureImage("img-168x112.png", "tiny-qwen3vl");
  const std::string prompts[2] = {
      "<|im_start|>user\n<__media__>Describe this image.<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>user\n<__media__>What colors do you see?<|im_end|>\n<|im_start|>assistant\n"};
  std::string direct[2];
  {
    engine::runtime::EngineOptions eo;
    eo.threads = 2;
    eo.n_ctx = 512;
    eo.mmproj_path = dir + "/mmproj.gguf";
    auto engine = engine::runtime::VlmEngine::Load(dir + "/text.gguf", eo);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine::runtime::ImageTimings t;
    auto encoded = (*engine)->EncodeImage(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(image.data()), image.size()), &t);
    ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
    for (int i = 0; i < 2; ++i) {
      auto rows = (*engine)->BuildPrompt(prompts[i], std::span<const engine::runtime::EncodedImage>(&*encoded, 1), true);
      ASSERT_TRUE(rows.ok()) << rows.status().ToString();
      engine::runtime::GenerateParams p;
      p.max_tokens = 12;
      auto r = (*engine)->Generate(*rows, p);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      direct[i] = r->text;
    }
  }
  HarnessOptions o;
  o.load_model = false;
  Harness h(o);
  ModelSpec spec = testing::FixtureSpec("moe");
  spec.text_path = dir + "/text.gguf";
  spec.mmproj_path = dir + "/mmproj.gguf";
  AddFixtureModel(h.server(), spec);
  h.server().SetReady(true);
  json answers[2];
  std::thread second([&] {
    auto c = h.Client();
    answers[1] = Post(*c, "/v1/vlm/invoke", json{{"prompt", prompts[1]}, {"raw_prompt", true}, {"max_tokens", 12},
                                                 {"image_base64", api::EncodeBase64(image)}});
  });
  {
    auto c = h.Client();
    answers[0] = Post(*c, "/v1/vlm/invoke", json{{"prompt", prompts[0]}, {"raw_prompt", true}, {"max_tokens", 12},
                                                 {"image_base64", api::EncodeBase64(image)}});
  }
  second.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(answers[i]["http"], 200) << answers[i].dump();
    EXPECT_EQ(answers[i]["text"], direct[i]) << i;
  }
  EXPECT_NE(direct[0], direct[1]);
  std::filesystem::remove_all(dir);
}

// Two images, the first shared with an earlier request: the reused prefix stops where the
// images differ, so the answer is the one a fresh server gives. Qwen3-VL's image rows are wider
// than the decoder's (deepstack features): the row identities once took the first image for all
// of the rows and reused the earlier request's second image.
TEST(ServerFamilyReuseTest, ReusedPrefixEndsAtTheFirstDifferentImage) {
  for (const Family& f : {kQwen3vl, kQwen25vl, kGemma3}) {
    SCOPED_TRACE(f.fixture);
    auto request = [](int second_split) {
      return json{{"prompt", "<__media__><__media__>What differs?"},
                  {"raw_prompt", true},
                  {"max_tokens", 6},
                  {"images_base64",
                   {api::EncodeBase64(SplitFrame(8)), api::EncodeBase64(SplitFrame(second_split))}}};
    };
    json fresh;
    {
      Harness h(FamilyOptions(f));
      fresh = Post(*h.Client(), "/v1/vlm/invoke", request(56));
      ASSERT_EQ(fresh["http"], 200) << fresh.dump();
    }
    Harness h(FamilyOptions(f));
    auto c = h.Client();
    const json other = Post(*c, "/v1/vlm/invoke", request(30));
    ASSERT_EQ(other["http"], 200) << other.dump();
    const json again = Post(*c, "/v1/vlm/invoke", request(56));
    ASSERT_EQ(again["http"], 200) << again.dump();
    EXPECT_EQ(again["text"], fresh["text"]);
    // At most the first image (and the text before it) is reused, never the second's rows.
    EXPECT_LT(again["usage"]["reused_prompt_tokens"].get<int>(),
              (again["usage"]["prompt_tokens"].get<int>() + 1) / 2) << again.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ServerFamilyTest, ::testing::Values(kQwen25vl, kLlava16, kInternVl, kGemma3),
                         [](const ::testing::TestParamInfo<Family>& i) {
                           std::string s = i.param.fixture;
                           for (char& ch : s) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return s;
                         });

// Each step is the next smaller size Qwen's smart resize gives the image, down to its minimum of
// 8 tokens: 168x112 (a 6 x 4 grid, 24 visual tokens) goes 140x84 (15), 112x84 (12), 112x56 (8).
// The prompt's text and <|vision_start|>, <|vision_end|> take 12 tokens. (The steps were a token
// limit shrunk by squares: 24 went straight to 12 under a budget that fits 15, and on to 6.)
TEST(ServerFamilyBudget, QwenShrinksToTheNextSmallerSizeAndSaysSo) {
  json req{{"prompt", "hi"}, {"max_tokens", 2},
           {"image_base64", api::EncodeBase64(FixtureImage("img-168x112.png", kQwen25vl.fixture))}};
  auto post = [&](int64_t budget) {
    HarnessOptions o = FamilyOptions(kQwen25vl);
    o.server.prepare.token_budget = budget;
    Harness h(o);
    return Post(*h.Client(), "/v1/vlm/invoke", req);
  };
  struct Step {
    int64_t budget;
    int w, h;
  };
  for (const Step& s : {Step{30, 140, 84}, Step{26, 112, 84}, Step{22, 112, 56}}) {
    const json a = post(s.budget);
    ASSERT_EQ(a["http"], 200) << a.dump();
    ASSERT_TRUE(a.contains("budget")) << a.dump();
    EXPECT_LE(a["usage"]["prompt_tokens"].get<int64_t>(), s.budget);
    EXPECT_EQ(a["budget"]["downsampled_from"], json::array({168, 112}));
    EXPECT_EQ(a["budget"]["to"], json::array({s.w, s.h})) << "budget " << s.budget;
  }
  // Below the family's minimum (8 tokens) it cannot go: 422.
  const json b = post(19);
  EXPECT_EQ(b["http"], 422) << b.dump();
}

// Two images over the budget: each shrinks (the larger first, step by step), and the reply names
// every one that did (it named the first only).
TEST(ServerFamilyBudget, EveryShrunkImageIsNamed) {
  HarnessOptions o = FamilyOptions(kQwen25vl);
  o.server.prepare.token_budget = 40;
  Harness h(o);
  json req{{"prompt", "A <__media__> B <__media__>"},
           {"max_tokens", 2},
           {"images_base64",
            {api::EncodeBase64(FixtureImage("img-168x112.png", kQwen25vl.fixture)),
             api::EncodeBase64(FixtureImage("img-140x140.png", kQwen25vl.fixture))}}};
  const json a = Post(*h.Client(), "/v1/vlm/invoke", req);
  ASSERT_EQ(a["http"], 200) << a.dump();
  EXPECT_LE(a["usage"]["prompt_tokens"].get<int>(), 40);
  const json images = a["budget"]["images"];
  ASSERT_EQ(images.size(), 2u) << a.dump();
  EXPECT_EQ(images[0]["index"], 0);
  EXPECT_EQ(images[0]["downsampled_from"], json::array({168, 112}));
  EXPECT_EQ(images[1]["index"], 1);
  EXPECT_EQ(images[1]["downsampled_from"], json::array({140, 140}));
  // At the top level, as before: the first image the budget shrank, the one with the most rows
  // (140x140: 25 against 24).
  EXPECT_EQ(a["budget"]["downsampled_from"], images[1]["downsampled_from"]);
  EXPECT_EQ(a["budget"]["to"], images[1]["to"]);
}

// Each image is one query of the visual-embedding cache however many steps it waits for its
// encoding to start (hits / queries is the ratio operators watch): the second image waits one
// step behind the first (one ViT work unit per step), which counted it twice. Once the reply is
// out the scheduler is idle, and its memory gauges say what it holds then: no K/V, since
// nothing is parked for prefix reuse (they kept the last step's values).
TEST(ServerFamilyCache, EachImageIsOneQueryAndTheIdleGaugesAreCurrent) {
  HarnessOptions o = FamilyOptions(kQwen25vl);
  o.scheduler.prefix_cache_entries = 0;
  Harness h(o);
  auto c = h.Client();
  json req{{"prompt", "A <__media__> B <__media__>"},
           {"max_tokens", 6},  // decoded over several steps: the gauge has its K/V at one
           {"images_base64",
            {api::EncodeBase64(FixtureImage("img-168x112.png", kQwen25vl.fixture)),
             api::EncodeBase64(FixtureImage("img-140x140.png", kQwen25vl.fixture))}}};
  const json first = Post(*c, "/v1/vlm/invoke", req);
  ASSERT_EQ(first["http"], 200) << first.dump();
  ASSERT_GE(first["usage"]["completion_tokens"].get<int>(), 3) << "not decoded over several steps";
  std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_embedding_cache_queries_total"), 2);
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_embedding_cache_hits_total"), 0);
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_embedding_success_total"), 2);
  // The reply can be out before the scheduler's step has ended: the gauge is read until it
  // shows no K/V (it never did without the idle update), for up to two seconds.
  double kv = -1;
  for (int i = 0; i < 200 && kv != 0; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    kv = testing::MetricValue(c->Get("/metrics")->body, "vlm_memory_bytes{kind=\"kv\"}");
  }
  EXPECT_EQ(kv, 0);
  ASSERT_EQ(Post(*c, "/v1/vlm/invoke", req)["http"], 200);
  metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_embedding_cache_queries_total"), 4);
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_embedding_cache_hits_total"), 2);
}

TEST(ServerFamilyBudget, Llava16PicksFewerSlicesThenTheOverview) {
  HarnessOptions o = FamilyOptions(kLlava16);
  // 64x48 fits the 64x64 pinpoint: 4 slices + the overview, 80 visual tokens (+ 15 of text).
  // A budget of 70 leaves room for the 64x32 grid (2 slices + overview, 48 tokens).
  o.server.prepare.token_budget = 70;
  Harness h(o);
  json req{{"prompt", "hi"}, {"max_tokens", 2},
           {"image_base64", api::EncodeBase64(FixtureImage("img-64x48.png", kLlava16.fixture))}};
  const json a = Post(*h.Client(), "/v1/vlm/invoke", req);
  ASSERT_EQ(a["http"], 200) << a.dump();
  ASSERT_TRUE(a.contains("budget")) << a.dump();
  EXPECT_LE(a["usage"]["prompt_tokens"].get<int>(), 70);
  EXPECT_EQ(a["usage"]["image_tokens"], 48) << a.dump();
  // The sizes are the grids' (what the slices are cut from), as for every tiled family.
  EXPECT_EQ(a["budget"]["downsampled_from"], json::array({64, 64}));
  EXPECT_EQ(a["budget"]["to"], json::array({64, 32}));

  // 40: only the overview (16 tokens) fits.
  o.server.prepare.token_budget = 40;
  Harness overview(o);
  const json b = Post(*overview.Client(), "/v1/vlm/invoke", req);
  ASSERT_EQ(b["http"], 200) << b.dump();
  EXPECT_EQ(b["usage"]["image_tokens"], 16) << b.dump();
  EXPECT_EQ(b["budget"]["to"], json::array({32, 32}));

  // Not even the overview: 422.
  o.server.prepare.token_budget = 20;
  Harness small(o);
  const json c = Post(*small.Client(), "/v1/vlm/invoke", req);
  EXPECT_EQ(c["http"], 422) << c.dump();
}

TEST(ServerFamilyBudget, InternVlPicksFewerTilesThenTheThumbnail) {
  HarnessOptions o = FamilyOptions(kInternVl);
  json req{{"prompt", "hi"}, {"max_tokens", 2},
           {"image_base64", api::EncodeBase64(FixtureImage("img-96x64.png", kInternVl.fixture))}};
  // Unbounded: 96x64 fits the 3x2 grid, 6 tiles + the thumbnail, 112 visual tokens.
  Harness full(o);
  const json a = Post(*full.Client(), "/v1/vlm/invoke", req);
  ASSERT_EQ(a["http"], 200) << a.dump();
  EXPECT_EQ(a["usage"]["image_tokens"], 112) << a.dump();
  EXPECT_FALSE(a.contains("budget"));
  const int text = a["usage"]["prompt_tokens"].get<int>() - 112;

  // Room for three tiles: a smaller grid, and the reply says so.
  o.server.prepare.token_budget = text + 4 * 16;
  Harness h(o);
  const json b = Post(*h.Client(), "/v1/vlm/invoke", req);
  ASSERT_EQ(b["http"], 200) << b.dump();
  ASSERT_TRUE(b.contains("budget")) << b.dump();
  EXPECT_LE(b["usage"]["prompt_tokens"].get<int>(), text + 4 * 16);
  EXPECT_LT(b["usage"]["image_tokens"].get<int>(), 112);
  EXPECT_EQ(b["usage"]["image_tokens"].get<int>() % 16, 0);
  EXPECT_EQ(b["budget"]["downsampled_from"], json::array({96, 64}));

  // Room for the thumbnail alone.
  o.server.prepare.token_budget = text + 16;
  Harness thumb(o);
  const json c = Post(*thumb.Client(), "/v1/vlm/invoke", req);
  ASSERT_EQ(c["http"], 200) << c.dump();
  EXPECT_EQ(c["usage"]["image_tokens"], 16) << c.dump();

  // Not even that: 422.
  o.server.prepare.token_budget = text + 8;
  Harness small(o);
  const json d = Post(*small.Client(), "/v1/vlm/invoke", req);
  EXPECT_EQ(d["http"], 422) << d.dump();
}

// One server, one image, two budgets' worth of room: a 1x1 grid with its thumbnail and the
// thumbnail alone are both one tile's size; they once shared an image-cache entry, so the second
// request got the first one's two tiles, over its budget.
TEST(ServerFamilyBudget, InternVlShrunkImagesOfOneTileSizeAreDifferentCacheEntries) {
  HarnessOptions o = FamilyOptions(kInternVl);
  const std::string image = api::EncodeBase64(FixtureImage("img-96x64.png", kInternVl.fixture));
  auto request = [&](const std::string& prompt) {
    return json{{"prompt", prompt}, {"max_tokens", 2}, {"image_base64", image}};
  };
  std::string long_prompt = "hi";
  for (int i = 0; i < 8; ++i) long_prompt += " hi";
  int short_text = 0, long_text = 0;
  {
    Harness full(o);
    const json a = Post(*full.Client(), "/v1/vlm/invoke", request("hi"));
    const json b = Post(*full.Client(), "/v1/vlm/invoke", request(long_prompt));
    ASSERT_EQ(a["http"], 200) << a.dump();
    ASSERT_EQ(b["http"], 200) << b.dump();
    short_text = a["usage"]["prompt_tokens"].get<int>() - a["usage"]["image_tokens"].get<int>();
    long_text = b["usage"]["prompt_tokens"].get<int>() - b["usage"]["image_tokens"].get<int>();
  }
  ASSERT_GT(long_text, short_text);
  ASSERT_LE(long_text, short_text + 16);
  // Room for two tiles with the short prompt, for one with the long one.
  o.server.prepare.token_budget = short_text + 2 * 16;
  Harness h(o);
  auto c = h.Client();
  const json two = Post(*c, "/v1/vlm/invoke", request("hi"));
  ASSERT_EQ(two["http"], 200) << two.dump();
  EXPECT_EQ(two["usage"]["image_tokens"], 32) << two.dump();
  const json one = Post(*c, "/v1/vlm/invoke", request(long_prompt));
  ASSERT_EQ(one["http"], 200) << one.dump();
  EXPECT_EQ(one["usage"]["image_tokens"], 16) << one.dump();
  EXPECT_LE(one["usage"]["prompt_tokens"].get<int>(), short_text + 2 * 16) << one.dump();
  EXPECT_EQ(one["cache"]["image"], "miss") << one.dump();
}

TEST(ServerFamilyBudget, Gemma3FixedSizeImageCannotShrink) {
  HarnessOptions o = FamilyOptions(kGemma3);
  json req{{"prompt", "hi"}, {"max_tokens", 2},
           {"image_base64", api::EncodeBase64(FixtureImage("img-96x64.png", kGemma3.fixture))}};
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

// Routing is family-blind: complexity tiers whose models are a Qwen2.5-VL, a LLaVA-1.6 and a
// Gemma 3 send a flat image with a short prompt to the first, a busy image with a short prompt to
// the middle one and a busy image with a long prompt to the last, each through its own
// preprocessing, encoder and template, answering what that model answers when asked by name
// (greedy); a 50/50 split between two families serves every client from one of them, both APIs.
TEST(ServerFamilyRouting, RoutesAcrossFamiliesAnswerAsTheModelAskedByName) {
  auto server = StartServer({}, {FixtureSpec("qwen", "q", kQwen25vl.fixture),
                                 FixtureSpec("llava", "l", kLlava16.fixture),
                                 FixtureSpec("gemma", "g", kGemma3.fixture)});
  RouteConfig tiers;
  tiers.name = "auto";
  tiers.tiers = {"qwen", "llava", "gemma"};
  server->router().SetRoutes({tiers, SplitRoute("split", {{"llava", 50}, {"gemma", 50}})}, "");
  auto c = ClientOf(*server);
  const std::string flat = "P6\n64 64\n255\n" + std::string(64 * 64 * 3, char(128));
  std::string busy = "P6\n64 64\n255\n";
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) busy += std::string(3, ((x / 2 + y / 2) % 2) ? char(255) : char(0));
  }
  std::string long_prompt;
  for (int i = 0; i < 80; ++i) {
    long_prompt.append("w").append(std::to_string(i * 7919 % 1000)).append(" ");
  }
  struct Ask {
    std::string image, prompt, tier, model, version;
  };
  for (const Ask& ask : {Ask{flat, "hi", "light", "qwen", "q"},
                         Ask{busy, "hi", "balanced", "llava", "l"},
                         Ask{busy, long_prompt, "robust", "gemma", "g"}}) {
    json req{{"model", "auto"}, {"prompt", ask.prompt}, {"max_tokens", 6},
             {"image_base64", api::EncodeBase64(ask.image)}};
    const json routed = Post(*c, "/v1/vlm/invoke", req);
    ASSERT_EQ(routed["http"], 200) << routed.dump();
    EXPECT_EQ(routed["routing"]["tier"], ask.tier) << routed.dump();
    EXPECT_EQ(routed["version"], ask.version) << routed.dump();
    req["model"] = ask.model;
    const json named = Post(*c, "/v1/vlm/invoke", req);
    ASSERT_EQ(named["http"], 200) << named.dump();
    EXPECT_EQ(routed["text"], named["text"]);
    EXPECT_EQ(routed["usage"]["prompt_tokens"], named["usage"]["prompt_tokens"]);
  }
  const std::string uri = "data:image/ppm;base64," + api::EncodeBase64(busy);
  for (const char* path : {"/v1/vlm/invoke", "/v1/chat/completions"}) {
    const json req =
        std::string(path) == "/v1/vlm/invoke"
            ? json{{"model", "split"}, {"prompt", "What is it?"}, {"max_tokens", 3},
                   {"image_base64", api::EncodeBase64(busy)}}
            : json{{"model", "split"}, {"max_tokens", 3},
                   {"messages",
                    {{{"role", "user"},
                      {"content",
                       {{{"type", "image_url"}, {"image_url", {{"url", uri}}}},
                        {{"type", "text"}, {"text", "What is it?"}}}}}}}};
    const json a = Post(*c, path, req);
    ASSERT_EQ(a["http"], 200) << path << " " << a.dump();
    EXPECT_EQ(a["routing"]["route"], "split") << a.dump();
    EXPECT_TRUE(a["version"] == "l" || a["version"] == "g") << a.dump();
  }
}

}  // namespace
}  // namespace vlmd::serve
