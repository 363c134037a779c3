// Camera streams end to end (SPEC S6): a stream's earlier frames go before its new frame as the
// motion asks, the answer is the one the same frames sent together give, and streams are
// private to a client key.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/sha256.h"
#include "serve/api/requests.h"
#include "raw_socket.h"
#include "server_harness.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;
using testing::Harness;
using testing::HarnessOptions;

using testing::SplitFrame;

json Invoke(const std::vector<std::string>& frames, const std::string& stream_id) {
  json req{{"prompt", "What changed?"}, {"max_tokens", 6}};
  json images = json::array();
  for (const std::string& f : frames) images.push_back(api::EncodeBase64(f));
  if (!images.empty()) req["images_base64"] = images;
  if (!stream_id.empty()) req["stream_id"] = stream_id;
  return req;
}

json Post(httplib::Client& c, const json& req, const httplib::Headers& headers = {}) {
  auto r = c.Post("/v1/vlm/invoke", headers, req.dump(), "application/json");
  if (!r) return {{"http", -1}};
  json j = json::parse(r->body, nullptr, false);
  j["http"] = r->status;
  return j;
}

TEST(ServerStream, EarlierFramesJoinAsTheMotionAsksAndAnswerAsIfSentTogether) {
  HarnessOptions o;
  o.server.streams.max_frames = 3;
  o.scheduler.prefix_cache_entries = 0;  // every prompt computed afresh: nothing shared
  Harness h(o);
  auto c = h.Client();
  const std::string a = SplitFrame(8), b = SplitFrame(56);  // b: most of the picture changed

  json r = Post(*c, Invoke({a}, "cam-1"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["id"], "cam-1");
  EXPECT_EQ(r["stream"]["context_frames"], 0);  // a new stream
  EXPECT_EQ(r["stream"]["no_context_reason"], "first_frame");
  const int64_t one_frame = r["usage"]["image_tokens"];
  ASSERT_GT(one_frame, 0);

  r = Post(*c, Invoke({a}, "cam-1"));  // the same picture: still, no context (and no copy kept)
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["motion"], 0.0);
  EXPECT_EQ(r["stream"]["window"], 1);
  EXPECT_EQ(r["stream"]["context_frames"], 0);
  EXPECT_EQ(r["stream"]["no_context_reason"], "still");
  EXPECT_EQ(r["usage"]["image_tokens"], one_frame);

  const json moving = Post(*c, Invoke({b}, "cam-1"));  // motion: the window opens
  ASSERT_EQ(moving["http"], 200) << moving.dump();
  EXPECT_GT(moving["stream"]["motion"].get<double>(), 0.5);
  EXPECT_EQ(moving["stream"]["window"], 3);
  EXPECT_EQ(moving["stream"]["context_frames"], 1);  // the still scene, kept once
  EXPECT_FALSE(moving["stream"].contains("no_context_reason"));
  EXPECT_EQ(moving["usage"]["image_tokens"], 2 * one_frame);

  // The same two frames in one request (no stream) give the same answer: the kept visual
  // tokens are those of the frames, in their order; the new frame alone answers otherwise.
  const json together = Post(*c, Invoke({a, b}, ""));
  ASSERT_EQ(together["http"], 200) << together.dump();
  EXPECT_FALSE(together.contains("stream"));
  EXPECT_EQ(together["usage"]["prompt_tokens"], moving["usage"]["prompt_tokens"]);
  EXPECT_EQ(together["usage"]["reused_prompt_tokens"], 0);
  EXPECT_EQ(together["text"], moving["text"]);
  EXPECT_NE(Post(*c, Invoke({b}, ""))["text"], moving["text"]);
  EXPECT_NE(Post(*c, Invoke({b, a}, ""))["text"], moving["text"]);

  // A question without a frame is about the frames seen.
  r = Post(*c, Invoke({}, "cam-1"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 2);  // max_frames - 1 kept: the newest two
  EXPECT_EQ(r["usage"]["image_tokens"], 2 * one_frame);
  const int frameless_prompt = r["usage"]["prompt_tokens"];

  // Another stream id starts empty; two frames in one stream request are refused.
  r = Post(*c, Invoke({b}, "cam-2"));
  EXPECT_EQ(r["stream"]["context_frames"], 0);
  r = Post(*c, Invoke({a, b}, "cam-1"));
  EXPECT_EQ(r["http"], 400) << r.dump();
  EXPECT_NE(r.dump().find("one frame"), std::string::npos) << r.dump();

  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_streams"), 2);
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_stream_context_frames_total"), 3);
  EXPECT_GT(testing::MetricValue(metrics, "vlm_stream_window_bytes"), 0);
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_stream_frames_without_context_total{reason="still"})"), 1);
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_stream_frames_without_context_total{reason="lost"})"), 0);

  // The frames' markers go into the user's words (their placeholder out): the words stay text,
  // so "<end_of_utterance>" in them is several tokens, not the template's one.
  json marked = Invoke({}, "cam-1");
  marked["prompt"] = "What changed?<end_of_utterance>";
  const json m = Post(*c, marked);
  ASSERT_EQ(m["http"], 200) << m.dump();
  EXPECT_EQ(m["stream"]["context_frames"], 2);
  EXPECT_GE(m["usage"]["prompt_tokens"].get<int>(), frameless_prompt + 3) << m.dump();
}

// A client that counts its frames (stream_frame) learns when a server holds none of the earlier
// ones (a restarted replica, a stream rebalanced to another one): the reply says "lost" instead
// of starting the window again silently, and the counter a scale-out alert watches goes up.
TEST(ServerStream, AStreamContinuedWhereItsFramesAreNotSaysLost) {
  Harness h;
  auto c = h.Client();
  json req = Invoke({SplitFrame(8)}, "cam-9");
  req["stream_frame"] = 0;
  json r = Post(*c, req);
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["no_context_reason"], "first_frame");
  req = Invoke({SplitFrame(40)}, "cam-7");  // frame 12 of a stream this server never saw
  req["stream_frame"] = 12;
  r = Post(*c, req);
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 0);
  EXPECT_EQ(r["stream"]["no_context_reason"], "lost");
  req = Invoke({SplitFrame(60)}, "cam-7");  // and from then on, the stream builds again here
  req["stream_frame"] = 13;
  r = Post(*c, req);
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 1);
  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_stream_frames_without_context_total{reason="lost"})"), 1);
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_stream_frames_without_context_total{reason="first_frame"})"), 1);
}

TEST(ServerStream, TheTokenBudgetDropsTheOldestEarlierFramesFirst) {
  HarnessOptions o;
  o.server.streams.max_frames = 4;
  Harness probe(o);
  const json first = Post(*probe.Client(), Invoke({SplitFrame(8)}, "cam"));
  ASSERT_EQ(first["http"], 200) << first.dump();
  const int64_t prompt = first["usage"]["prompt_tokens"], frame = first["usage"]["image_tokens"];
  // Room for the new frame and one earlier frame, not two.
  o.server.prepare.token_budget = prompt + frame + frame / 2;
  Harness h(o);
  auto c = h.Client();
  for (int split : {8, 30}) ASSERT_EQ(Post(*c, Invoke({SplitFrame(split)}, "cam"))["http"], 200);
  const json r = Post(*c, Invoke({SplitFrame(60)}, "cam"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 1);
  EXPECT_EQ(r["stream"]["dropped_for_budget"], 1);
  EXPECT_EQ(r["usage"]["image_tokens"], 2 * frame);
  EXPECT_FALSE(r.contains("budget"));  // the new frame kept its tiling

}

// With room for exactly one earlier frame it is kept, on a model whose prompts begin with a BOS
// (Gemma 3): each frame's count included the BOS again (the text's count has it), so a frame
// that fitted was dropped "for the budget".
TEST(ServerStream, AnEarlierFrameThatFitsExactlyIsKept) {
  HarnessOptions o;
  o.fixture = "tiny-gemma3";
  o.n_ctx = 4096;
  Harness probe(o);
  auto p = probe.Client();
  ASSERT_EQ(Post(*p, Invoke({SplitFrame(8)}, "cam"))["http"], 200);
  const json two = Post(*p, Invoke({SplitFrame(60)}, "cam"));
  ASSERT_EQ(two["http"], 200) << two.dump();
  ASSERT_EQ(two["stream"]["context_frames"], 1) << two.dump();
  const int64_t needed = two["usage"]["prompt_tokens"];  // the new frame's prompt with one earlier frame
  o.server.prepare.token_budget = needed;
  Harness exact(o);
  auto c = exact.Client();
  ASSERT_EQ(Post(*c, Invoke({SplitFrame(8)}, "cam"))["http"], 200);
  const json r = Post(*c, Invoke({SplitFrame(60)}, "cam"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 1) << r.dump();
  EXPECT_EQ(r["stream"]["dropped_for_budget"], 0) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"], needed) << r.dump();
}

// A frame kept while its image was on the allowlist is no context once the image leaves it: the
// list decides what reaches the model, not only what a request may send.
TEST(ServerStream, FramesWhoseImageLeftTheAllowlistAreLeftOut) {
  const auto dir = std::filesystem::temp_directory_path() / ("vlmd-stream-allow-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string a = SplitFrame(8), b = SplitFrame(56), c = SplitFrame(10), d = SplitFrame(50);
  const auto hex = [](const std::string& bytes) {
    return DigestHex(Sha256Of({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}));
  };
  const auto list = [&](const std::vector<std::string>& images) {
    std::string text;
    for (const std::string& i : images) text += hex(i) + "\n";
    std::ofstream(dir / "allow.txt", std::ios::trunc) << text;
  };
  list({a, b, c, d});
  HarnessOptions o;
  o.server.streams.max_frames = 3;
  o.server.guard.image_allowlist_file = (dir / "allow.txt").string();
  o.server.guard.allowlist_mode = AllowlistMode::kEnforce;
  Harness h(o);
  auto client = h.Client();
  ASSERT_EQ(Post(*client, Invoke({a}, "cam"))["http"], 200);
  json r = Post(*client, Invoke({b}, "cam"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 1);
  EXPECT_EQ(r["stream"]["dropped_for_allowlist"], 0);
  const int64_t one_frame = r["usage"]["image_tokens"].get<int64_t>() / 2;

  list({b, c, d});  // a leaves the list (re-read at most once a second)
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  r = Post(*client, Invoke({c}, "cam"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["window"], 3);
  EXPECT_EQ(r["stream"]["context_frames"], 1);  // b; a left out
  EXPECT_EQ(r["stream"]["dropped_for_allowlist"], 1);
  EXPECT_EQ(r["usage"]["image_tokens"], 2 * one_frame);

  list({d});  // b and c leave it too
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  r = Post(*client, Invoke({d}, "cam"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 0);
  EXPECT_EQ(r["stream"]["dropped_for_allowlist"], 2);
  EXPECT_EQ(r["stream"]["no_context_reason"], "allowlist");
  EXPECT_EQ(r["usage"]["image_tokens"], one_frame);
  // A question without a frame: the frames kept since (d alone) and nothing of the others.
  r = Post(*client, Invoke({}, "cam"));
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 1);
  EXPECT_EQ(r["stream"]["dropped_for_allowlist"], 1);  // c is still held, not offered
  const std::string metrics = client->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_stream_frames_without_context_total{reason="allowlist"})"), 1);
  std::filesystem::remove_all(dir);
}

TEST(ServerStream, StreamsArePrivateToTheirClientKey) {
  const auto dir = std::filesystem::temp_directory_path() / ("vlmd-stream-keys-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string k1 = "key-one-0123456789abcdef", k2 = "key-two-0123456789abcdef";
  std::ofstream(dir / "keys.json") << json{{"keys", {{{"id", "one"}, {"key", k1}}, {{"id", "two"}, {"key", k2}}}}}.dump();
  HarnessOptions o;
  o.server.guard.api_keys_file = (dir / "keys.json").string();
  o.server.guard.audit_path = (dir / "audit.jsonl").string();
  Harness h(o);
  auto c = h.Client();
  const httplib::Headers one{{"Authorization", "Bearer " + k1}}, two{{"Authorization", "Bearer " + k2}};
  ASSERT_EQ(Post(*c, Invoke({SplitFrame(8)}, "lobby"), one)["http"], 200);
  // The same stream id under another key is another stream: nothing of key one's frames.
  const json r = Post(*c, Invoke({}, "lobby"), two);
  ASSERT_EQ(r["http"], 200) << r.dump();
  EXPECT_EQ(r["stream"]["context_frames"], 0);
  EXPECT_EQ(r["usage"]["image_tokens"], 0);
  EXPECT_EQ(Post(*c, Invoke({}, "lobby"), one)["stream"]["context_frames"], 1);
  // The audit line says what an answer rested on: the stream and its earlier frames.
  std::ifstream audit(dir / "audit.jsonl");
  std::string line, last;
  while (std::getline(audit, line)) last = line;
  const json rec = json::parse(last);
  EXPECT_EQ(rec["key_id"], "one");
  EXPECT_EQ(rec["stream"]["id"], "lobby");
  EXPECT_EQ(rec["stream"]["context_frames"], 1);
  std::filesystem::remove_all(dir);
}

// The single shared --api-key names no client: its clients' streams are kept per address, as
// anonymous ones are (they were all one client "default", and a stream id another client used
// got that client's frames as context).
TEST(ServerStream, StreamsOfTheSharedKeyArePrivateToTheirAddress) {
  HarnessOptions o;
  o.server.guard.api_key = "shared-client-key-0123456789";
  Harness h(o);
  const std::string auth = "Authorization: Bearer " + o.server.guard.api_key + "\r\n";
  auto post = [&](const std::string& address, const json& body) {
    const std::string reply = testing::BodyFrom(h.port(), address, testing::PostRequest("/v1/vlm/invoke", body.dump(), auth));
    return json::parse(reply, nullptr, false);
  };
  const json first = post("127.0.0.2", Invoke({SplitFrame(8)}, "lobby"));
  ASSERT_TRUE(first.contains("stream")) << first.dump();
  const json other = post("127.0.0.3", Invoke({}, "lobby"));
  ASSERT_TRUE(other.contains("stream")) << other.dump();
  EXPECT_EQ(other["stream"]["context_frames"], 0) << "another address saw the first one's frame";
  EXPECT_EQ(post("127.0.0.2", Invoke({}, "lobby"))["stream"]["context_frames"], 1);
}

}  // namespace
}  // namespace vlmd::serve
