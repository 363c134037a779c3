// Tracing end to end (SPEC O2): a server with an OTLP endpoint posts a request's spans to a
// local fake collector; the request's traceparent is continued; the reply names the server span.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "serve/api/requests.h"
#include "serve/http/span_exporter.h"
#include "serve/obs/metrics.h"
#include "serve/obs/trace.h"
#include "server_harness.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;
using testing::FixtureImage;
using testing::Harness;
using testing::HarnessOptions;

// Collects the spans POSTed to /v1/traces (OTLP/HTTP JSON), by name.
class FakeCollector {
 public:
  FakeCollector() {
    http_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      const json j = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (j.is_discarded() || req.get_header_value("Content-Type") != "application/json") {
        ++malformed_;
      } else {
        service_ = j["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"];
        for (const json& s : j["resourceSpans"][0]["scopeSpans"][0]["spans"]) spans_.push_back(s);
      }
      cv_.notify_all();
      res.set_content("{}", "application/json");
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeCollector() {
    http_.stop();
    thread_.join();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces"; }
  // The spans of `trace_id` once there are `n` of them (or what came within 10 s).
  std::vector<json> Spans(const std::string& trace_id, size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<json> out;
    cv_.wait_for(lock, std::chrono::seconds(10), [&] {
      out.clear();
      for (const json& s : spans_) {
        if (s["traceId"] == trace_id) out.push_back(s);
      }
      return out.size() >= n;
    });
    return out;
  }
  size_t total() {
    std::lock_guard<std::mutex> lock(mu_);
    return spans_.size();
  }
  int malformed() {
    std::lock_guard<std::mutex> lock(mu_);
    return malformed_;
  }
  std::string service() {
    std::lock_guard<std::mutex> lock(mu_);
    return service_;
  }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<json> spans_;
  int malformed_ = 0;
  std::string service_;
};

std::map<std::string, json> ByName(const std::vector<json>& spans) {
  std::map<std::string, json> m;
  for (const json& s : spans) m[s["name"].get<std::string>()] = s;
  return m;
}

std::string Attr(const json& span, const std::string& key) {
  for (const json& a : span["attributes"]) {
    if (a["key"] != key) continue;
    const json& v = a["value"];
    if (v.contains("stringValue")) return v["stringValue"];
    if (v.contains("intValue")) return v["intValue"];
    return v.dump();
  }
  return "(absent)";
}

// vlm_trace_spans_total{result} once it reaches `want` (or what it is after 10 s).
double SpanCount(httplib::Client& c, const std::string& result, double want) {
  double n = -1;
  for (int i = 0; i < 100; ++i) {
    n = testing::MetricValue(c.Get("/metrics")->body, "vlm_trace_spans_total{result=\"" + result + "\"}");
    if (n >= want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return n;
}

// A server whose spans go to `collector`.
HarnessOptions TracedTo(const FakeCollector& collector) {
  HarnessOptions o;
  o.server.tracing.otlp_endpoint = collector.Url();
  return o;
}

int64_t Ns(const json& span, const char* key) { return std::stoll(span[key].get<std::string>()); }

TEST(ServerTrace, ARequestsSpansContinueItsTraceAndReachTheCollector) {
  FakeCollector collector;
  Harness h(TracedTo(collector));
  auto c = h.Client();
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736", caller = "00f067aa0ba902b7";
  const json req{{"prompt", "Describe the image."},
                 {"max_tokens", 3},
                 {"image_base64", api::EncodeBase64(FixtureImage("img-128x96.png"))}};
  auto r = c->Post("/v1/vlm/invoke", {{"traceparent", "00-" + trace + "-" + caller + "-01"}},
                   req.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json reply = json::parse(r->body);
  // The reply names the server's span in the caller's trace.
  auto response = obs::ParseTraceParent(r->get_header_value("traceresponse"));
  ASSERT_TRUE(response.has_value()) << r->get_header_value("traceresponse");
  EXPECT_EQ(obs::Hex(response->trace_id), trace);
  EXPECT_TRUE(response->sampled());

  const auto spans = ByName(collector.Spans(trace, 5));
  ASSERT_EQ(spans.size(), 5u) << json(collector.Spans(trace, 0)).dump();
  EXPECT_EQ(collector.service(), "vlmd");
  const json& server = spans.at("POST /v1/vlm/invoke");
  EXPECT_EQ(server["parentSpanId"], caller);
  EXPECT_EQ(server["spanId"], obs::Hex(response->parent_id));
  EXPECT_EQ(server["kind"], 2);
  EXPECT_EQ(Attr(server, "http.response.status_code"), "200");
  EXPECT_EQ(Attr(server, "vlm.request_id"), r->get_header_value("X-Request-Id"));
  for (const char* name : {"decode-image", "encode", "prefill", "decode"}) {
    const json& s = spans.at(name);
    EXPECT_EQ(s["parentSpanId"], server["spanId"]) << name;
    EXPECT_EQ(s["kind"], 1) << name;
    // Inside the request, in order of the phases.
    EXPECT_GE(Ns(s, "startTimeUnixNano"), Ns(server, "startTimeUnixNano")) << name;
    EXPECT_LE(Ns(s, "endTimeUnixNano"), Ns(server, "endTimeUnixNano")) << name;
    EXPECT_LE(Ns(s, "startTimeUnixNano"), Ns(s, "endTimeUnixNano")) << name;
  }
  EXPECT_LE(Ns(spans.at("decode-image"), "endTimeUnixNano"), Ns(spans.at("encode"), "startTimeUnixNano"));
  EXPECT_LE(Ns(spans.at("encode"), "endTimeUnixNano"), Ns(spans.at("prefill"), "startTimeUnixNano"));
  EXPECT_LE(Ns(spans.at("prefill"), "endTimeUnixNano"), Ns(spans.at("decode"), "startTimeUnixNano"));
  EXPECT_EQ(Attr(spans.at("decode-image"), "image_resolution"), "128x96");
  EXPECT_EQ(Attr(spans.at("encode"), "image_resolution"), "128x96");
  const std::string visual = std::to_string(reply["usage"]["image_tokens"].get<int64_t>());
  EXPECT_NE(visual, "0");
  EXPECT_EQ(Attr(spans.at("encode"), "visual_tokens"), visual);
  EXPECT_EQ(Attr(spans.at("prefill"), "visual_tokens"), visual);
  EXPECT_EQ(Attr(spans.at("decode"), "output_tokens"),
            std::to_string(reply["usage"]["completion_tokens"].get<int64_t>()));
  EXPECT_EQ(collector.malformed(), 0);
  // Counted once the post has returned (a moment after the collector has the spans).
  EXPECT_EQ(SpanCount(*c, "exported", 5), 5);
}

TEST(ServerTrace, UnsampledAndMissingTraceparentsAndFailedRequests) {
  FakeCollector collector;
  Harness h(TracedTo(collector));
  auto c = h.Client();
  const json text{{"prompt", "hi"}, {"max_tokens", 2}};
  // The caller did not sample: the trace continues (traceresponse) but nothing is sent.
  const std::string unsampled = "0af7651916cd43dd8448eb211c80319c";
  auto r = c->Post("/v1/vlm/invoke", {{"traceparent", "00-" + unsampled + "-b7ad6b7169203331-00"}},
                   text.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("traceresponse").substr(3, 32), unsampled);
  EXPECT_EQ(r->get_header_value("traceresponse").substr(53), "00");
  // No (or an invalid) traceparent: a new trace, recorded at the default ratio 1, a root span.
  r = c->Post("/v1/vlm/invoke", {{"traceparent", "00-xyz"}}, text.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto fresh = obs::ParseTraceParent(r->get_header_value("traceresponse"));
  ASSERT_TRUE(fresh.has_value());
  const auto spans = ByName(collector.Spans(obs::Hex(fresh->trace_id), 3));
  ASSERT_EQ(spans.size(), 3u);  // text only: no decode-image or encode
  EXPECT_FALSE(spans.at("POST /v1/vlm/invoke").contains("parentSpanId"));
  EXPECT_TRUE(spans.count("prefill") && spans.count("decode"));
  // A refused request has its server span, with its status (4xx is not a server error).
  r = c->Post("/v1/vlm/invoke", "{bad json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  auto refused = obs::ParseTraceParent(r->get_header_value("traceresponse"));
  ASSERT_TRUE(refused.has_value());
  const auto failed = collector.Spans(obs::Hex(refused->trace_id), 1);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(Attr(failed[0], "http.response.status_code"), "400");
  EXPECT_FALSE(failed[0].contains("status"));
  // An image that cannot be decoded: its decode-image span carries the error.
  r = c->Post("/v1/vlm/invoke", json{{"prompt", "x"}, {"image_base64", api::EncodeBase64("not an image")}}.dump(),
              "application/json");
  ASSERT_TRUE(r);
  EXPECT_GE(r->status, 400);
  auto bad_image = obs::ParseTraceParent(r->get_header_value("traceresponse"));
  ASSERT_TRUE(bad_image.has_value());
  const auto image_spans = ByName(collector.Spans(obs::Hex(bad_image->trace_id), 2));
  ASSERT_EQ(image_spans.count("decode-image"), 1u);
  EXPECT_EQ(image_spans.at("decode-image")["status"]["code"], 2);
  EXPECT_EQ(collector.Spans(unsampled, 0).size(), 0u);
}

TEST(ServerTrace, AnUnreachableCollectorDropsSpansAndServesOn) {
  HarnessOptions o;
  o.server.tracing.otlp_endpoint = "http://127.0.0.1:1/v1/traces";  // nothing listens on port 1
  Harness h(o);
  auto c = h.Client();
  for (int i = 0; i < 2; ++i) {
    auto r = c->Post("/v1/vlm/invoke", json{{"prompt", "hi"}, {"max_tokens", 2}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_EQ(SpanCount(*c, "dropped", 6), 6);  // 3 spans per request, posted in the background
}

// A collector that takes the connection and then trickles its reply, a byte every second (each
// read well within the post's timeout): a post used to last as long as it trickled, and a server
// stopping waited for it. The exporter stops within its shutdown bound all the same.
TEST(ServerTrace, ASlowCollectorCannotHoldUpTheShutdown) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::atomic<bool> quit{false};
  std::thread collector([&] {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    char buf[65536];
    (void)read(fd, buf, sizeof(buf));  // the request
    const std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    for (size_t i = 0; i < reply.size() && !quit.load(); ++i) {
      (void)write(fd, &reply[i], 1);
      for (int t = 0; t < 10 && !quit.load(); ++t) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    close(fd);
  });
  obs::Registry registry;
  obs::CounterFamily* spans = &registry.AddCounter("spans_total", "spans", {"result"});
  SpanExporterOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/v1/traces";
  o.flush_interval = std::chrono::milliseconds(10);
  auto exporter = SpanExporter::Create(o, spans);
  ASSERT_TRUE(exporter.ok()) << exporter.status().ToString();
  obs::Span s;
  s.name = "request";
  (*exporter)->Export({s});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its post is in flight
  const auto t0 = std::chrono::steady_clock::now();
  exporter->reset();
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(stop_s, 4.0) << "the exporter waited for a slow collector";
  quit = true;
  collector.join();
  close(listener);
}

TEST(ServerTrace, ABadEndpointOrRatioStopsTheStart) {
  ServerOptions o;
  o.port = 0;
  o.tracing.otlp_endpoint = "collector:4318";
  EXPECT_EQ(Server(o).Start().code(), StatusCode::kInvalidArgument);
  o.tracing.otlp_endpoint = "";
  o.tracing.sample_ratio = 2;
  EXPECT_EQ(Server(o).Start().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vlmd::serve
