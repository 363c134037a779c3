// Distributed tracing (SPEC O2): the W3C Trace Context `traceparent` header
// (https://www.w3.org/TR/trace-context/), spans, and their OTLP/JSON encoding (the OpenTelemetry
// protocol's JSON mapping, which collectors accept on POST /v1/traces). Pure functions; the
// exporter that sends them is serve/http/span_exporter.h.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace vlmd::serve::obs {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

struct TraceParent {
  TraceId trace_id{};
  SpanId parent_id{};
  uint8_t flags = 0;
  bool sampled() const { return (flags & 1) != 0; }
};

// Parses a traceparent value by the W3C rules: "VV-TTTT...(32)-PPPP...(16)-FF", lowercase hex;
// version ff, an all-zero trace id or parent id, or any other shape is invalid (nullopt: the
// caller starts a new trace). Version 00 must be exactly 55 characters; a later version may
// carry more fields after a '-', which are ignored.
std::optional<TraceParent> ParseTraceParent(std::string_view value);
// "00-<trace id>-<span id>-<flags>".
std::string FormatTraceParent(const TraceId& trace_id, const SpanId& span_id, uint8_t flags);

// Lowercase hex of the bytes.
std::string Hex(std::span<const uint8_t> bytes);
// Random ids (OpenSSL's CSPRNG), never all zero.
TraceId NewTraceId();
SpanId NewSpanId();
// Whether a new trace is recorded at this sampling ratio (0..1), decided by the trace id's last
// 8 bytes as OpenTelemetry's TraceIdRatioBased sampler in Go does: a function of the id, so
// services that sample that way keep the same traces.
bool SampledByRatio(const TraceId& trace_id, double ratio);

using AttributeValue = std::variant<int64_t, double, std::string, bool>;
struct Attribute {
  std::string key;
  AttributeValue value;
};

enum class SpanKind : int { kInternal = 1, kServer = 2 };

struct Span {
  std::string name;
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_id{};  // all zero: a root span
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<Attribute> attributes;
  bool error = false;          // status ERROR (else UNSET)
  std::string status_message;  // with error
};

// One OTLP ExportTraceServiceRequest in the JSON mapping: one resource (service.name,
// service.version) with one scope ("vlmd") holding the spans. Ids are hex, 64-bit integers and
// timestamps decimal strings, as the mapping requires.
std::string OtlpJson(std::span<const Span> spans, std::string_view service_name,
                     std::string_view service_version);

}  // namespace vlmd::serve::obs
