// The guard rails end to end over real HTTP on 127.0.0.1 (issue 6): image allowlist (enforce,
// report, reload), API keys with rate limits, admin key, audit log, routing (weighted sticky
// split, complexity tiers) and trust signals. The word filter: server_filter_e2e_test.cpp. Hot
// swap, memory budget, image URLs and shutdown: server_lifecycle_e2e_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "core/sha256.h"
#include "engine/image/decode_budget.h"
#include "serve/api/requests.h"
#include "serve/obs/trace.h"
#include "raw_socket.h"
#include "server_harness.h"
#include "server_test_servers.h"

namespace vlmd::serve {
namespace {

using testing::FixtureImage;

TEST(ServerGuard, AllowlistEnforceRefusesUnlistedImagesAndReloadsWithoutRestart) {
  TempDir dir;
  const std::string listed = FixtureImage("img-128x96.png");
  const std::string unlisted = FixtureImage("img-50x100.png");
  const auto hex = [](const std::string& b) {
    return DigestHex(Sha256Of({reinterpret_cast<const uint8_t*>(b.data()), b.size()}));
  };
  ServerOptions o;
  o.guard.image_allowlist_file = dir.Write("allow.txt", "# cameras of line 3\n" + hex(listed) + "\n");
  o.guard.allowlist_mode = AllowlistMode::kEnforce;
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  auto invoke = [&](const std::string& img) {
    json req{{"prompt", "What is this?"}, {"max_tokens", 2}, {"image_base64", api::EncodeBase64(img)}};
    return c->Post("/v1/vlm/invoke", req.dump(), "application/json");
  };
  auto ok = invoke(listed);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto denied = invoke(unlisted);
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_EQ(json::parse(denied->body)["error"]["code"], "image_not_allowed");
  EXPECT_NE(denied->body.find(hex(unlisted)), std::string::npos);
  // Never decoded: bytes that are no image at all get 403, not the decoder's 400/415.
  auto garbage = invoke("definitely not an image");
  ASSERT_TRUE(garbage);
  EXPECT_EQ(garbage->status, 403);
  std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, "vlm_embedding_cache_queries_total"), 1);
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_policy_decisions_total{policy="allowlist",decision="deny"})"), 2);

  // Add the second image to the file: allowed without a restart (the file is re-checked at most
  // once a second).
  dir.Write("allow.txt", hex(listed) + "\n" + hex(unlisted) + "  # added later\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto now_ok = invoke(unlisted);
  ASSERT_TRUE(now_ok);
  EXPECT_EQ(now_ok->status, 200) << now_ok->body;
}

TEST(ServerGuard, AllowlistReportModeAllowsAndCounts) {
  TempDir dir;
  ServerOptions o;
  o.guard.image_allowlist_file = dir.Write("allow.txt", std::string(64, 'a') + "\n");
  o.guard.allowlist_mode = AllowlistMode::kReport;
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  json req{{"prompt", "What is this?"}, {"max_tokens", 2},
           {"image_base64", api::EncodeBase64(FixtureImage("img-50x100.png"))}};
  auto r = c->Post("/v1/vlm/invoke", req.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(testing::MetricValue(c->Get("/metrics")->body,
                                 R"(vlm_policy_decisions_total{policy="allowlist",decision="report"})"),
            1);
}

TEST(ServerGuard, ApiKeysFileRateLimitsAndAdminKeyAreSeparate) {
  TempDir dir;
  const std::string fast = "fast-key-0123456789abcdef", slow = "slow-key-0123456789abcdef";
  ServerOptions o;
  o.guard.api_keys_file = dir.Write(
      "keys.json", json{{"keys",
                         {{{"id", "team-fast"}, {"key", fast}},
                          {{"id", "team-slow"}, {"key", slow}, {"rate_per_s", 0.2}, {"burst", 1}}}}}
                       .dump());
  o.guard.admin_key = "admin-key-0123456789abcdef";
  o.guard.audit_path = dir.Path("audit.jsonl");
  o.guard.audit_refusal_interval_s = 0;  // every refusal's own line (flood sampling: below)
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  const std::string body = ChatRequest("hi", 2).dump();
  EXPECT_EQ(c->Post("/v1/chat/completions", body, "application/json")->status, 401);
  EXPECT_EQ(c->Post("/v1/chat/completions", Bearer("wrong-key-0123456789abcdef"), body, "application/json")->status, 401);
  EXPECT_EQ(c->Get("/v1/models")->status, 401);
  EXPECT_EQ(c->Get("/v1/models", Bearer(fast))->status, 200);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c->Post("/v1/chat/completions", Bearer(fast), body, "application/json")->status, 200);
  }
  EXPECT_EQ(c->Post("/v1/chat/completions", Bearer(slow), body, "application/json")->status, 200);
  auto limited = c->Post("/v1/chat/completions", Bearer(slow), body, "application/json");
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->status, 429);
  EXPECT_EQ(json::parse(limited->body)["error"]["code"], "rate_limited");
  EXPECT_GE(std::stoi(limited->get_header_value("Retry-After")), 1);
  // The model list takes a token of the key's rate too (its line names the key, below).
  EXPECT_EQ(c->Get("/v1/models", Bearer(slow))->status, 429);

  // Admin: a client key does not open it; the admin key does; admin keys do not open /v1.
  EXPECT_EQ(c->Get("/admin/models", Bearer(fast))->status, 401);
  EXPECT_EQ(c->Get("/admin/models")->status, 401);
  EXPECT_EQ(c->Get("/admin/models", Bearer(o.guard.admin_key))->status, 200);
  EXPECT_EQ(c->Post("/v1/chat/completions", Bearer(o.guard.admin_key), body, "application/json")->status, 401);
  // The scheme name is case-insensitive.
  EXPECT_EQ(c->Get("/v1/models", {{"Authorization", "bearer " + fast}})->status, 200);
  // An admin action is audited, a malformed one too (its body is read after its first line).
  EXPECT_EQ(c->Post("/admin/models/tiny-smolvlm/reload", Bearer(o.guard.admin_key), "", "application/json")->status, 200);
  EXPECT_EQ(c->Post("/admin/routes/none/weights", Bearer(o.guard.admin_key), "not json", "application/json")->status,
            400);
  // A path no route has, a method its route does not take, and a path longer than any route
  // each get their refusal and a line (they had none); the last one (30000 bytes: std::regex
  // recursed once per character and the server died) a 414, and the server keeps serving.
  EXPECT_EQ(c->Get("/v1/nothing", Bearer(fast))->status, 404);
  EXPECT_EQ(c->Get("/v1/vlm/invoke", Bearer(fast))->status, 405);
  auto long_path = c->Post("/admin/models/" + std::string(30000, 'A') + "/reload",
                           Bearer(o.guard.admin_key), "", "application/json");
  ASSERT_TRUE(long_path);
  EXPECT_EQ(long_path->status, 414);
  EXPECT_EQ(c->Get("/v1/models", Bearer(fast))->status, 200);

  // The audit log has one line per generation request, with the key id and never a key.
  std::ifstream in(o.guard.audit_path);
  std::string line, all;
  std::map<int, int> by_status;
  int admin_intents = 0, model_lists = 0;
  while (std::getline(in, line)) {
    all += line + "\n";
    const json rec = json::parse(line);
    if (rec["route"] == "/v1/models" && rec["status"] == 200) {
      EXPECT_EQ(rec["key_id"], "team-fast") << line;
      ++model_lists;
    }
    if (rec.value("phase", "") == "requested") {  // an admin action's line before it acts
      EXPECT_EQ(rec["key_id"], "admin") << line;
      EXPECT_FALSE(rec.contains("status")) << line;
      ++admin_intents;
      continue;
    }
    if (rec["route"] == "/admin/models/{name}/reload") {  // its outcome says what now serves
      EXPECT_TRUE(rec.contains("version") && rec.contains("previous_version")) << line;
      EXPECT_EQ(rec.value("model_hash", std::string()).size(), 64u) << line;
    }
    by_status[rec["status"].get<int>()]++;
    // A key over its rate is named in its line (it was "": the line did not say whose).
    if (rec["status"] == 429) {
      EXPECT_EQ(rec["key_id"], "team-slow") << line;
    }
    EXPECT_TRUE(rec.contains("time"));
    EXPECT_TRUE(rec.contains("request_id"));
    // Generation requests past authentication and routing (those refused before have no trace
    // yet).
    if ((rec["route"] == "/v1/vlm/invoke" || rec["route"] == "/v1/chat/completions") &&
        rec["status"] != 401 && rec["status"] != 405) {
      EXPECT_TRUE(obs::ParseTraceParent("00-" + rec.value("trace_id", std::string()) +
                                        "-00f067aa0ba902b7-01"))
          << line;  // the request's trace, for the spans of a collector
    }
    EXPECT_FALSE(rec.contains("messages"));  // prompts are not logged unless configured
  }
  // 200: 4 generations, the reload, 3 model lists and the admin's model list (a read of the
  // files' paths, audited); 401: two generations, /v1/models, two admin refusals and the admin
  // key on /v1; 429: a generation and a model list; 400: the malformed weights; 404, 405, 414:
  // one each.
  EXPECT_EQ(by_status[200], 9);
  EXPECT_EQ(by_status[400], 1);
  EXPECT_EQ(model_lists, 3);
  EXPECT_EQ(by_status[401], 6);
  EXPECT_EQ(by_status[429], 2);
  EXPECT_EQ(by_status[404], 1);
  EXPECT_EQ(by_status[405], 1);
  EXPECT_EQ(by_status[414], 1);
  EXPECT_EQ(admin_intents, 2);
  EXPECT_NE(all.find("\"key_id\":\"admin\""), std::string::npos);
  EXPECT_EQ(all.find(fast), std::string::npos);
  EXPECT_EQ(all.find(slow), std::string::npos);
  EXPECT_NE(all.find("\"key_id\":\"team-slow\""), std::string::npos);
  // The model lists answered are counted as every other request (they were not: only refused ones).
  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_requests_total{route="/v1/models",status="200"})"), 3);
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_requests_total{route="/v1/models",status="429"})"), 1);
}

// With API keys, the visual-embedding cache and prefix reuse stay within one key: a second key
// sending the same image and prompt gets a miss and no reused rows (they told it, and their
// timings, what the first key had sent), then its own hit and reuse the next time.
TEST(ServerGuard, CachesAndPrefixReuseStayWithinOneClientKey) {
  TempDir dir;
  const std::string key_a = "tenant-a-0123456789abcdef", key_b = "tenant-b-0123456789abcdef";
  ServerOptions o;
  o.guard.api_keys_file = dir.Write(
      "keys.json", json{{"keys", {{{"id", "a"}, {"key", key_a}}, {{"id", "b"}, {"key", key_b}}}}}.dump());
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  const json req{{"prompt", "patient record: what does this scan show?"},
                 {"max_tokens", 2},
                 {"image_base64", api::EncodeBase64(FixtureImage("img-50x100.png"))}};
  auto send = [&](const std::string& key) {
    auto r = c->Post("/v1/vlm/invoke", Bearer(key), req.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
    return r ? json::parse(r->body) : json::object();
  };
  const json a1 = send(key_a), a2 = send(key_a), b1 = send(key_b), b2 = send(key_b);
  EXPECT_EQ(a1["cache"]["image"], "miss");
  EXPECT_EQ(a2["cache"]["image"], "hit");
  EXPECT_GT(a2["usage"]["reused_prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(b1["cache"]["image"], "miss") << b1.dump();
  EXPECT_EQ(b1["usage"]["reused_prompt_tokens"], 0) << b1.dump();
  EXPECT_EQ(b2["cache"]["image"], "hit");
  EXPECT_EQ(b2["usage"]["reused_prompt_tokens"], a2["usage"]["reused_prompt_tokens"]);
  EXPECT_EQ(b1["text"], a1["text"]);  // the same answer, computed again
}

// A flood of refusals before authentication writes one line per address and interval and one
// summary line with the count at shutdown, so that it cannot rotate the real trail away; an
// authenticated request still gets its own line. Request ids carry the start's random prefix.
// A request the connection layer refuses (here a body over --max-body-mb, refused from its head)
// is audited like the refusals at the door; it had no line at all.
TEST(ServerGuard, RequestsRefusedByTheConnectionLayerAreAudited) {
  TempDir dir;
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  o.guard.audit_path = dir.Path("audit.jsonl");
  std::string reply_id;
  {
    auto server = StartServer(o);
    const std::string head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 40000000\r\n\r\n";
    const testing::RawReply r = testing::Exchange(server->port(), head);
    EXPECT_EQ(r.bytes.rfind("HTTP/1.1 413", 0), 0u) << r.bytes;
    // The line is written by a handler thread, the reply by the I/O thread: the same request id.
    const size_t at = r.bytes.find("X-Request-Id: ");
    ASSERT_NE(at, std::string::npos) << r.bytes;
    reply_id = r.bytes.substr(at + 14, r.bytes.find("\r\n", at) - at - 14);
  }
  std::ifstream in(o.guard.audit_path);
  std::string line;
  int refused = 0;
  while (std::getline(in, line)) {
    const json rec = json::parse(line);
    if (rec.value("status", 0) == 413) {
      EXPECT_EQ(rec["route"], "/v1/chat/completions") << line;
      EXPECT_EQ(rec["error"], "payload_too_large") << line;
      EXPECT_EQ(rec["remote_addr"], "127.0.0.1") << line;
      EXPECT_EQ(rec["request_id"], reply_id) << line;
      ++refused;
    }
  }
  EXPECT_EQ(refused, 1);
}

TEST(ServerGuard, RefusalFloodIsSummarizedNotWrittenLineByLine) {
  TempDir dir;
  const std::string key = "client-key-0123456789abcdef";
  ServerOptions o;
  o.guard.api_key = key;
  o.guard.audit_path = dir.Path("audit.jsonl");
  o.guard.audit_refusal_interval_s = 3600;
  std::string first_id;
  {
    auto server = StartServer(o);
    auto c = ClientOf(*server);
    for (int i = 0; i < 50; ++i) {
      auto r = i % 2 ? c->Get("/v1/models") : c->Post("/v1/chat/completions", "{}", "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 401);
      if (i == 0) first_id = r->get_header_value("X-Request-Id");
    }
    auto ok = c->Post("/v1/chat/completions", Bearer(key), ChatRequest("hi", 2).dump(), "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
    // Every refusal is counted, under a bounded route label.
    EXPECT_EQ(c->Get("/v1/no-such-route")->status, 401);
    auto m = c->Get("/metrics");
    ASSERT_TRUE(m);
    for (const char* series : {"vlm_requests_total{route=\"/v1/models\",status=\"401\"} 25",
                               "vlm_requests_total{route=\"/v1/chat/completions\",status=\"401\"} 25",
                               "vlm_requests_total{route=\"other\",status=\"401\"} 1"}) {
      EXPECT_NE(m->body.find(series), std::string::npos) << series;
    }
  }  // the server stops: the open interval's summary is written
  std::ifstream in(o.guard.audit_path);
  std::string line;
  int refusals = 0, ok_lines = 0, summaries = 0;
  while (std::getline(in, line)) {
    const json rec = json::parse(line);
    if (rec.value("event", "") == "refusals_left_out") {
      ++summaries;
      EXPECT_EQ(rec["count"], 50) << line;  // 49 of the flood + the unknown route
      EXPECT_EQ(rec["remote_addr"], "127.0.0.1") << line;
      EXPECT_TRUE(rec.contains("first") && rec.contains("last") && rec.contains("time")) << line;
    } else if (rec["status"] == 401) {
      ++refusals;
      EXPECT_EQ(rec["request_id"], first_id);
    } else if (rec["status"] == 200) {
      ++ok_lines;
    }
  }
  EXPECT_EQ(refusals, 1);
  EXPECT_EQ(summaries, 1);
  EXPECT_EQ(ok_lines, 1);
  // "req-<8 hex digits>-<n>", the prefix new at every start.
  ASSERT_EQ(first_id.size(), 14u) << first_id;
  EXPECT_EQ(first_id.substr(0, 4), "req-");
  EXPECT_EQ(first_id.find_first_not_of("0123456789abcdef", 4), 12u) << first_id;
  EXPECT_EQ(first_id.substr(12), "-1");
  EXPECT_NE(RandomInstanceId(), RandomInstanceId());  // 2^-32 odds of a false failure
}

TEST(ServerGuard, AdminKeyMustBeLongAndDistinctFromClientKeys) {
  ServerOptions o;
  o.guard.api_key = "same-key-0123456789abcdef";
  o.guard.admin_key = o.guard.api_key;
  Server same(o);
  EXPECT_EQ(same.Start().code(), StatusCode::kInvalidArgument);
  o.guard.admin_key = "short";
  Server short_key(o);
  EXPECT_EQ(short_key.Start().code(), StatusCode::kInvalidArgument);
}

TEST(ServerGuard, MalformedStreamOptionsIs400) {
  auto server = StartServer({});
  auto c = ClientOf(*server);
  json req = ChatRequest("hi", 2, true);
  req["stream_options"] = {{"include_usage", "yes"}};
  auto r = c->Post("/v1/chat/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  req["stream_options"] = 3;
  EXPECT_EQ(c->Post("/v1/chat/completions", req.dump(), "application/json")->status, 400);
  // Without streaming it is refused too, as OpenAI answers.
  json plain = ChatRequest("hi", 2, false);
  plain["stream_options"] = {{"include_usage", true}};
  EXPECT_EQ(c->Post("/v1/chat/completions", plain.dump(), "application/json")->status, 400);
  // "stream": null is no stream (the parser reads null as absent): a 400 too, not a 500.
  plain["stream"] = nullptr;
  auto null_stream = c->Post("/v1/chat/completions", plain.dump(), "application/json");
  ASSERT_TRUE(null_stream);
  EXPECT_EQ(null_stream->status, 400) << null_stream->body;
  EXPECT_NE(null_stream->body.find("only allowed when"), std::string::npos) << null_stream->body;
}

// A 405 names the methods the path takes (RFC 9110).
TEST(ServerGuard, MethodNotAllowedNamesTheAllowedMethods) {
  auto server = StartServer({});
  auto c = ClientOf(*server);
  auto r = c->Get("/v1/chat/completions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  auto m = c->Post("/v1/models", "", "application/json");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 405);
  EXPECT_EQ(m->get_header_value("Allow"), "GET, HEAD");
}

TEST(ServerGuard, AStreamingClientThatLeavesStillGetsItsAuditLine) {
  TempDir dir;
  ServerOptions o;
  o.guard.audit_path = dir.Path("audit.jsonl");
  auto server = StartServer(o);
  {
    auto c = ClientOf(*server);
    httplib::Request r;
    r.method = "POST";
    r.path = "/v1/vlm/invoke";
    r.body = json{{"prompt", "Count slowly."}, {"max_tokens", 200}, {"stream", true}}.dump();
    r.set_header("Content-Type", "application/json");
    r.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };  // hang up
    c->send(r);
  }
  // The server notices at its next write; the line follows.
  std::string line;
  for (int i = 0; i < 200 && line.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::ifstream in(o.guard.audit_path);
    std::getline(in, line);
  }
  ASSERT_FALSE(line.empty());
  const json rec = json::parse(line);
  EXPECT_EQ(rec["status"], 499);
  EXPECT_EQ(rec["error"], "client_closed");
}

TEST(ServerGuard, AdminIsOffUnlessConfigured) {
  auto server = StartServer({});
  auto c = ClientOf(*server);
  auto r = c->Get("/admin/models", Bearer("anything-0123456789abcdef"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST(ServerGuard, AuditLogRecordsImagesDecisionsAndPromptsOnlyWhenAsked) {
  TempDir dir;
  ServerOptions o;
  o.guard.audit_path = dir.Path("audit.jsonl");
  o.guard.audit_prompts = true;
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  const std::string img = FixtureImage("img-128x96.png");
  json req{{"prompt", "secret prompt text"}, {"max_tokens", 2}, {"image_base64", api::EncodeBase64(img)}};
  auto r = c->Post("/v1/vlm/invoke", req.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  // The line is in the file before the reply reached us.
  std::ifstream in(o.guard.audit_path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const json rec = json::parse(line);
  EXPECT_EQ(rec["route"], "/v1/vlm/invoke");
  EXPECT_EQ(rec["status"], 200);
  EXPECT_EQ(rec["model"], "tiny-smolvlm");
  EXPECT_EQ(rec["model_hash"].get<std::string>().size(), 64u);
  EXPECT_EQ(rec["image_sha256"][0],
            DigestHex(Sha256Of({reinterpret_cast<const uint8_t*>(img.data()), img.size()})));
  EXPECT_NE(rec.dump().find("secret prompt text"), std::string::npos);
  EXPECT_EQ(rec["completion_tokens"], 2);
}

TEST(ServerGuard, WeightedSplitIsStickyPerKeyAndFollowsWeightChanges) {
  ServerOptions o;
  o.guard.admin_key = "admin-key-0123456789abcdef";
  auto server = StartServer(o, {FixtureSpec("vision-v1", "1.0"), FixtureSpec("vision-v2", "2.0")});
  server->router().SetRoutes({SplitRoute("vision", {{"vision-v1", 80}, {"vision-v2", 20}})}, "vision");
  auto c = ClientOf(*server);
  const std::string body = json{{"prompt", "hi"}, {"max_tokens", 1}}.dump();
  std::map<std::string, std::string> first;  // client -> version
  int v2 = 0;
  const int clients = 40;
  for (int i = 0; i < clients; ++i) {
    // Anonymous clients are keyed by address (all 127.0.0.1 here); send a key id via a keys
    // file in production. Here the split key is the address, so every request lands alike.
    auto r = c->Post("/v1/vlm/invoke", body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["model"], "vision");
    EXPECT_EQ(j["routing"]["route"], "vision");
    first["anon"] = first.count("anon") ? first["anon"] : j["version"].get<std::string>();
    EXPECT_EQ(j["version"], first["anon"]);  // sticky
    v2 += j["version"] == "2.0";
  }
  EXPECT_TRUE(v2 == 0 || v2 == clients);
  // Weights change at runtime: everything to v2.
  const json w{{"weights", {{{"model", "vision-v1"}, {"weight", 0}}, {{"model", "vision-v2"}, {"weight", 100}}}}};
  auto wr = c->Post("/admin/routes/vision/weights", Bearer(o.guard.admin_key), w.dump(), "application/json");
  ASSERT_TRUE(wr);
  ASSERT_EQ(wr->status, 200) << wr->body;
  const json j = json::parse(c->Post("/v1/vlm/invoke", body, "application/json")->body);
  EXPECT_EQ(j["version"], "2.0");
  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_GE(testing::MetricValue(metrics, R"(vlm_route_version_total{route="vision",model="vision-v2",version="2.0"})"), 1);
  // Memory gauges add up over the loaded models.
  // Each: the text and mmproj files mapped, plus packed copies (none in exact precision).
  const auto& engine = server->router().Get("vision-v1")->engine();
  const double weights = double(engine.model().memory_bytes() + engine.vision()->memory_bytes());
  EXPECT_EQ(weights, double(std::filesystem::file_size(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf")) +
                            std::filesystem::file_size(vlmd::testing::FixturePath("tiny-smolvlm/mmproj.gguf"))));
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_memory_bytes{kind="weights"})"), 2 * weights);
  // Bad weights are refused and change nothing.
  const json bad{{"weights", {{{"model", "vision-v1"}, {"weight", 1}}}}};
  EXPECT_EQ(c->Post("/admin/routes/vision/weights", Bearer(o.guard.admin_key), bad.dump(), "application/json")->status, 400);
  const json huge{{"weights", {{{"model", "vision-v1"}, {"weight", 1e308}}, {{"model", "vision-v2"}, {"weight", 1e308}}}}};
  EXPECT_EQ(c->Post("/admin/routes/vision/weights", Bearer(o.guard.admin_key), huge.dump(), "application/json")->status, 400);
  // The same weights named in another order: the route keeps its order, so nobody moves (the
  // sticky pick walks the cumulative weights in the route's order).
  const json half{{"weights", {{{"model", "vision-v1"}, {"weight", 50}}, {{"model", "vision-v2"}, {"weight", 50}}}}};
  const json flipped{{"weights", {{{"model", "vision-v2"}, {"weight", 50}}, {{"model", "vision-v1"}, {"weight", 50}}}}};
  ASSERT_EQ(c->Post("/admin/routes/vision/weights", Bearer(o.guard.admin_key), half.dump(), "application/json")->status, 200);
  const std::string before = json::parse(c->Post("/v1/vlm/invoke", body, "application/json")->body)["version"];
  ASSERT_EQ(c->Post("/admin/routes/vision/weights", Bearer(o.guard.admin_key), flipped.dump(), "application/json")->status, 200);
  EXPECT_EQ(json::parse(c->Post("/v1/vlm/invoke", body, "application/json")->body)["version"], before);
  EXPECT_EQ(server->router().GetRoute("vision")->split[0].model, "vision-v1");
}

// The single --api-key is every client's: a split keys its clients by address then, as it does
// anonymous ones (it keyed them all by the key id "default": one bucket, an 80/20 split sent
// everyone to one version). Clients here come from 40 loopback addresses.
TEST(ServerGuard, WeightedSplitWithTheSharedKeyIsStickyPerAddress) {
  ServerOptions o;
  o.guard.api_key = "shared-client-key-0123456789";
  auto server = StartServer(o, {FixtureSpec("vision-v1", "1.0"), FixtureSpec("vision-v2", "2.0")});
  server->router().SetRoutes({SplitRoute("vision", {{"vision-v1", 50}, {"vision-v2", 50}})}, "vision");
  const std::string body = json{{"prompt", "hi"}, {"max_tokens", 1}}.dump();
  const std::string request =
      testing::PostRequest("/v1/vlm/invoke", body, "Authorization: Bearer " + o.guard.api_key + "\r\n");
  auto version_from = [&](const std::string& address) -> std::string {
    const std::string reply = testing::BodyFrom(server->port(), address, request);
    const json j = json::parse(reply, nullptr, false);
    return j.is_object() && j.contains("version") ? j["version"].get<std::string>() : reply;
  };
  std::map<std::string, int> versions;
  for (int i = 2; i < 42; ++i) {
    const std::string address = "127.0.0." + std::to_string(i);
    const std::string v = version_from(address);
    ASSERT_TRUE(v == "1.0" || v == "2.0") << address << ": " << v;
    ++versions[v];
    if (i < 6) {
      EXPECT_EQ(version_from(address), v) << address << ": not sticky";
    }
  }
  EXPECT_GE(versions["1.0"], 5) << "one bucket for every client";
  EXPECT_GE(versions["2.0"], 5) << "one bucket for every client";
}

// An admin action whose audit line cannot be written does not happen: 500 audit_unavailable
// and the weights as they were (it changed them, answered 200 and left no line). The log cannot
// rotate here: its one kept file's name is taken by a non-empty directory.
TEST(ServerGuard, AdminActionsAreNotTakenUnaudited) {
  TempDir dir;
  ServerOptions o;
  o.guard.admin_key = "admin-key-0123456789abcdef";
  o.guard.audit_path = dir.Path("audit.jsonl");
  o.guard.audit_max_bytes = 4096;
  o.guard.audit_keep_files = 1;
  { std::ofstream(o.guard.audit_path) << std::string(5000, ' ') << "\n"; }  // due to rotate
  std::filesystem::create_directories(dir.Path("audit.jsonl.1/x"));
  auto server = StartServer(o, {FixtureSpec("vision-v1", "1.0"), FixtureSpec("vision-v2", "2.0")});
  server->router().SetRoutes({SplitRoute("vision", {{"vision-v1", 80}, {"vision-v2", 20}})}, "vision");
  auto c = ClientOf(*server);
  const json w{{"weights", {{{"model", "vision-v1"}, {"weight", 0}}, {{"model", "vision-v2"}, {"weight", 100}}}}};
  auto r = c->Post("/admin/routes/vision/weights", Bearer(o.guard.admin_key), w.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500) << r->body;
  EXPECT_NE(r->body.find("audit_unavailable"), std::string::npos) << r->body;
  const auto route = server->router().GetRoute("vision");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->split[0].weight, 80) << "the weights changed unaudited";
  auto reload = c->Post("/admin/models/vision-v1/reload", Bearer(o.guard.admin_key), "", "application/json");
  ASSERT_TRUE(reload);
  EXPECT_EQ(reload->status, 500) << reload->body;
}

TEST(ServerGuard, SplitDistributesClientKeysByWeight) {
  TempDir dir;
  json keys = json::array();
  const int n = 30;
  for (int i = 0; i < n; ++i) {
    keys.push_back({{"id", "client-" + std::to_string(i)}, {"key", "key-" + std::to_string(i) + "-0123456789abcdef"}});
  }
  ServerOptions o;
  o.guard.api_keys_file = dir.Write("keys.json", json{{"keys", keys}}.dump());
  auto server = StartServer(o, {FixtureSpec("a", "A"), FixtureSpec("b", "B")});
  server->router().SetRoutes({SplitRoute("canary", {{"a", 50}, {"b", 50}})}, "canary");
  auto c = ClientOf(*server);
  const std::string body = json{{"prompt", "hi"}, {"max_tokens", 1}}.dump();
  int on_b = 0;
  for (int i = 0; i < n; ++i) {
    const std::string key = "key-" + std::to_string(i) + "-0123456789abcdef";
    const json r1 = json::parse(c->Post("/v1/vlm/invoke", Bearer(key), body, "application/json")->body);
    const json r2 = json::parse(c->Post("/v1/vlm/invoke", Bearer(key), body, "application/json")->body);
    EXPECT_EQ(r1["version"], r2["version"]) << "client " << i << " is not sticky";
    on_b += r1["version"] == "B";
  }
  // 50/50 over 30 clients: both versions get some (P[all on one side] = 2^-29).
  EXPECT_GT(on_b, 0);
  EXPECT_LT(on_b, n);
}

TEST(ServerGuard, ComplexityTiersRouteSimpleAndBusyInputsApart) {
  auto server = StartServer({}, {FixtureSpec("small", "s"), FixtureSpec("mid", "m"), FixtureSpec("big", "b")});
  RouteConfig route;
  route.name = "auto";
  route.tiers = {"small", "mid", "big"};
  server->router().SetRoutes({route}, "");
  auto c = ClientOf(*server);
  // Flat image (a 64x64 gray PPM) and a one-word prompt: light.
  std::string flat = "P6\n64 64\n255\n" + std::string(64 * 64 * 3, char(128));
  json simple{{"model", "auto"}, {"prompt", "hi"}, {"max_tokens", 1}, {"image_base64", api::EncodeBase64(flat)}};
  auto ra = c->Post("/v1/vlm/invoke", simple.dump(), "application/json");
  ASSERT_TRUE(ra);
  ASSERT_EQ(ra->status, 200) << ra->body;
  const json a = json::parse(ra->body);
  EXPECT_EQ(a["routing"]["tier"], "light") << a.dump();
  EXPECT_EQ(a["version"], "s");
  EXPECT_LT(a["routing"]["complexity"].get<double>(), 0.3);
  // A 2-pixel checkerboard (all edges) and a long varied prompt: robust.
  std::string busy = "P6\n64 64\n255\n";
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x) busy += std::string(3, ((x / 2 + y / 2) % 2) ? char(255) : char(0));
  std::string prompt;
  for (int i = 0; i < 80; ++i) {
    prompt.append("w").append(std::to_string(i * 7919 % 1000)).append(" ");
  }
  json hard{{"model", "auto"}, {"prompt", prompt}, {"max_tokens", 1}, {"image_base64", api::EncodeBase64(busy)}};
  auto rb = c->Post("/v1/vlm/invoke", hard.dump(), "application/json");
  ASSERT_TRUE(rb);
  ASSERT_EQ(rb->status, 200) << rb->body;
  const json b = json::parse(rb->body);
  EXPECT_EQ(b["routing"]["tier"], "robust") << b.dump();
  EXPECT_EQ(b["version"], "b");
  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_route_tier_total{route="auto",tier="light"})"), 1);
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_route_tier_total{route="auto",tier="robust"})"), 1);
}

// Routing decodes the first image in full to score it; the chosen model takes that image instead
// of decoding the bytes again where its own decode would be the same (not a JPEG, or redaction
// on). A JPEG without redaction is decoded again by the model's own rule (its DCT scale).
TEST(ServerGuard, ARoutedImageIsDecodedOnceUnlessItsModelDecodesItSmaller) {
  ServerOptions o;
  o.decode_budget_bytes = 0;  // the server keeps the test's budget, which counts the decodes
  auto budget = std::make_shared<engine::image::DecodeBudget>(uint64_t{1} << 30,
                                                              std::chrono::milliseconds(1000));
  o.prepare.decode_limits.budget = budget;
  auto server = StartServer(o, {FixtureSpec("small", "s"), FixtureSpec("mid", "m"), FixtureSpec("big", "b")});
  RouteConfig route;
  route.name = "auto";
  route.tiers = {"small", "mid", "big"};
  server->router().SetRoutes({route}, "");
  auto c = ClientOf(*server);
  // The budget's reservations one request makes (one per decode of a pixel buffer).
  const auto decodes = [&](const std::string& model, const std::string& image) {
    const uint64_t before = budget->granted();
    const json req{{"model", model}, {"prompt", "hi"}, {"max_tokens", 1},
                   {"image_base64", api::EncodeBase64(image)}};
    auto r = c->Post("/v1/vlm/invoke", req.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
    return budget->granted() - before;
  };
  const std::string ppm = "P6\n64 64\n255\n" + std::string(64 * 64 * 3, char(90));
  const uint64_t direct = decodes("small", ppm);
  EXPECT_GE(direct, 1u);
  EXPECT_EQ(decodes("auto", ppm), direct);  // before: twice as many (routing, then the model)
  const std::string jpeg =
      testing::ReadText(vlmd::testing::SourcePath("tests/data/redact/astronaut.jpg"));
  EXPECT_GT(decodes("auto", jpeg), decodes("small", jpeg));  // the score's decode, then its own
  EXPECT_EQ(budget->in_use(), 0u);  // nothing held after the replies
}

TEST(ServerGuard, TrustSignalsAreInEveryReplyAndFlaggedOverTheThreshold) {
  ServerOptions o;
  o.guard.trust_flag_entropy_bits = 1e-6;  // any uncertainty at all is flagged
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  const json j = json::parse(c->Post("/v1/chat/completions", ChatRequest("hi", 4).dump(), "application/json")->body);
  ASSERT_TRUE(j.contains("trust")) << j.dump();
  const double entropy = j["trust"]["mean_entropy_bits"];
  const double min_p = j["trust"]["min_token_prob"];
  EXPECT_GT(entropy, 0.0);
  EXPECT_GT(min_p, 0.0);
  EXPECT_LE(min_p, 1.0);
  EXPECT_TRUE(j["trust"]["flagged"].get<bool>());
  // The min probability is the lowest chosen-token logprob.
  double lowest = 0;
  for (const json& t : j["choices"][0]["logprobs"]["content"]) lowest = std::min(lowest, t["logprob"].get<double>());
  EXPECT_NEAR(min_p, std::exp(lowest), 1e-6);
  EXPECT_EQ(testing::MetricValue(c->Get("/metrics")->body, "vlm_trust_flagged_total"), 1);
  // Streaming: the final chunk carries them.
  const Sse sse = ParseSse(c->Post("/v1/chat/completions", ChatRequest("hi", 4, true).dump(), "application/json")->body);
  EXPECT_TRUE(sse.last.contains("trust"));
}

}  // namespace
}  // namespace vlmd::serve
