// W3C traceparent parsing and the OTLP/JSON encoding (serve/obs/trace.h).
#include "serve/obs/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

namespace vlmd::serve::obs {
namespace {

TEST(TraceParent, ValidHeadersParseAndFormatBack) {
  const std::string v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto tp = ParseTraceParent(v);
  ASSERT_TRUE(tp.has_value());
  EXPECT_EQ(Hex(tp->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(Hex(tp->parent_id), "00f067aa0ba902b7");
  EXPECT_TRUE(tp->sampled());
  EXPECT_EQ(FormatTraceParent(tp->trace_id, tp->parent_id, tp->flags), v);
  auto unsampled = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled());
  // A later version may carry more fields; the first four are read.
  auto future = ParseTraceParent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-ever");
  ASSERT_TRUE(future.has_value());
  EXPECT_TRUE(future->sampled());
}

TEST(TraceParent, InvalidHeadersAreRefused) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",   // version 00 is 55 chars
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // not hex
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",    // separators
           "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",    // misplaced dash
           "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",   // later version, no dash
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",    // flags not hex
       }) {
    EXPECT_FALSE(ParseTraceParent(bad).has_value()) << bad;
  }
}

TEST(TraceParent, NewIdsAreRandomAndNeverZero) {
  std::set<std::string> traces, spans;
  for (int i = 0; i < 1000; ++i) {
    traces.insert(Hex(NewTraceId()));
    spans.insert(Hex(NewSpanId()));
  }
  EXPECT_EQ(traces.size(), 1000u);
  EXPECT_EQ(spans.size(), 1000u);
  EXPECT_FALSE(traces.count(std::string(32, '0')));
  EXPECT_FALSE(spans.count(std::string(16, '0')));
}

TEST(TraceParent, RatioSamplingKeepsAboutThatShare) {
  int kept = 0;
  for (int i = 0; i < 20000; ++i) kept += SampledByRatio(NewTraceId(), 0.25);
  EXPECT_NEAR(kept / 20000.0, 0.25, 0.02);
  const TraceId id = NewTraceId();
  EXPECT_TRUE(SampledByRatio(id, 1.0));
  EXPECT_FALSE(SampledByRatio(id, 0.0));
  // Decided by the last 8 bytes: low ones are kept at any ratio, high ones only at ratio 1.
  TraceId low{}, high{};
  low[0] = high[0] = 0xab;
  for (size_t i = 8; i < 16; ++i) high[i] = 0xff;
  low[15] = 1;
  EXPECT_TRUE(SampledByRatio(low, 0.001));
  EXPECT_FALSE(SampledByRatio(high, 0.999));
  TraceId half = high;
  half[8] = 0x7f;  // just under the middle of the range
  EXPECT_TRUE(SampledByRatio(half, 0.5));
  half[8] = 0x80;
  EXPECT_FALSE(SampledByRatio(half, 0.5));
}

TEST(Otlp, JsonFollowsTheProtocolsJsonMapping) {
  Span root;
  root.name = "POST /v1/vlm/invoke";
  root.trace_id = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")->trace_id;
  root.span_id = NewSpanId();
  root.kind = SpanKind::kServer;
  root.start_unix_ns = 1700000000000000000;
  root.end_unix_ns = 1700000000250000000;
  root.attributes = {{"http.response.status_code", int64_t{503}}, {"vlm.model", std::string("m")},
                     {"ratio", 0.5}, {"flag", true}};
  root.error = true;
  root.status_message = "HTTP 503";
  Span child;
  child.name = "decode";
  child.trace_id = root.trace_id;
  child.span_id = NewSpanId();
  child.parent_id = root.span_id;
  const std::vector<Span> spans{root, child};
  const auto j = nlohmann::json::parse(OtlpJson(spans, "vlmd", "0.1.0"));
  const auto& rs = j.at("resourceSpans").at(0);
  EXPECT_EQ(rs["resource"]["attributes"][0]["key"], "service.name");
  EXPECT_EQ(rs["resource"]["attributes"][0]["value"]["stringValue"], "vlmd");
  EXPECT_EQ(rs["resource"]["attributes"][1]["value"]["stringValue"], "0.1.0");
  const auto& out = rs["scopeSpans"][0]["spans"];
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(out[0]["spanId"], Hex(root.span_id));
  EXPECT_FALSE(out[0].contains("parentSpanId"));  // a root span
  EXPECT_EQ(out[0]["kind"], 2);
  EXPECT_EQ(out[0]["startTimeUnixNano"], "1700000000000000000");  // 64-bit values as strings
  EXPECT_EQ(out[0]["endTimeUnixNano"], "1700000000250000000");
  EXPECT_EQ(out[0]["attributes"][0]["value"]["intValue"], "503");
  EXPECT_EQ(out[0]["attributes"][1]["value"]["stringValue"], "m");
  EXPECT_EQ(out[0]["attributes"][2]["value"]["doubleValue"], 0.5);
  EXPECT_EQ(out[0]["attributes"][3]["value"]["boolValue"], true);
  EXPECT_EQ(out[0]["status"]["code"], 2);
  EXPECT_EQ(out[0]["status"]["message"], "HTTP 503");
  EXPECT_EQ(out[1]["parentSpanId"], Hex(root.span_id));
  EXPECT_EQ(out[1]["kind"], 1);
  EXPECT_FALSE(out[1].contains("status"));
}

}  // namespace
}  // namespace vlmd::serve::obs
