// W3C traceparent, span ids and the OTLP/JSON encoding (see trace.h).
#include "serve/obs/trace.h"

#include "core/sha256.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <openssl/rand.h>
#include <random>

namespace vlmd::serve::obs {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is invalid in traceparent
}

// Exactly 2 * out.size() lowercase hex digits into out.
bool ParseHex(std::string_view text, std::span<uint8_t> out) {
  if (text.size() != 2 * out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& a) {
  return std::all_of(a.begin(), a.end(), [](uint8_t b) { return b == 0; });
}

// Ids from OpenSSL's CSPRNG: span ids reach clients (traceresponse), and ids from a predictable
// generator would let one client guess another's. std::random_device if RAND_bytes ever fails.
template <size_t N>
std::array<uint8_t, N> RandomNonZero() {
  std::array<uint8_t, N> id{};
  do {
    if (RAND_bytes(id.data(), static_cast<int>(N)) != 1) {
      std::random_device rd;
      for (size_t i = 0; i < N; i += 4) {
        const uint32_t v = rd();
        std::memcpy(id.data() + i, &v, std::min<size_t>(4, N - i));
      }
    }
  } while (AllZero(id));
  return id;
}

}  // namespace

std::optional<TraceParent> ParseTraceParent(std::string_view value) {
  // version(2) - trace-id(32) - parent-id(16) - flags(2) = 55 characters.
  constexpr size_t kLength = 55;
  if (value.size() < kLength) return std::nullopt;
  uint8_t version = 0;
  if (!ParseHex(value.substr(0, 2), std::span<uint8_t>(&version, 1)) || version == 0xff) {
    return std::nullopt;
  }
  if (version == 0 ? value.size() != kLength : (value.size() > kLength && value[kLength] != '-')) {
    return std::nullopt;
  }
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  TraceParent tp;
  if (!ParseHex(value.substr(3, 32), tp.trace_id) || !ParseHex(value.substr(36, 16), tp.parent_id) ||
      !ParseHex(value.substr(53, 2), std::span<uint8_t>(&tp.flags, 1))) {
    return std::nullopt;
  }
  if (AllZero(tp.trace_id) || AllZero(tp.parent_id)) return std::nullopt;
  return tp;
}

std::string Hex(std::span<const uint8_t> bytes) { return HexOf(bytes); }

std::string FormatTraceParent(const TraceId& trace_id, const SpanId& span_id, uint8_t flags) {
  return "00-" + Hex(trace_id) + "-" + Hex(span_id) + "-" + Hex(std::span<const uint8_t>(&flags, 1));
}

TraceId NewTraceId() { return RandomNonZero<16>(); }
SpanId NewSpanId() { return RandomNonZero<8>(); }

bool SampledByRatio(const TraceId& trace_id, double ratio) {
  if (ratio >= 1.0) return true;
  if (ratio <= 0.0) return false;
  uint64_t low = 0;  // the id's last 8 bytes, big-endian
  for (size_t i = 8; i < 16; ++i) low = low << 8 | trace_id[i];
  // The top 63 bits against ratio * 2^63, in integers (a double would round 2^62 - 1 up).
  const uint64_t bound = static_cast<uint64_t>(ratio * 9223372036854775808.0);
  return (low >> 1) < bound;
}

std::string OtlpJson(std::span<const Span> spans, std::string_view service_name,
                     std::string_view service_version) {
  using nlohmann::json;
  auto value_of = [](const AttributeValue& v) {
    return std::visit(
        [](const auto& x) -> json {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>) return {{"intValue", std::to_string(x)}};
          if constexpr (std::is_same_v<T, double>) return {{"doubleValue", x}};
          if constexpr (std::is_same_v<T, std::string>) return {{"stringValue", x}};
          if constexpr (std::is_same_v<T, bool>) return {{"boolValue", x}};
        },
        v);
  };
  json out = json::array();
  for (const Span& s : spans) {
    json attrs = json::array();
    for (const Attribute& a : s.attributes) attrs.push_back({{"key", a.key}, {"value", value_of(a.value)}});
    json span{{"traceId", Hex(s.trace_id)},
              {"spanId", Hex(s.span_id)},
              {"name", s.name},
              {"kind", static_cast<int>(s.kind)},
              {"startTimeUnixNano", std::to_string(s.start_unix_ns)},
              {"endTimeUnixNano", std::to_string(s.end_unix_ns)},
              {"attributes", attrs}};
    if (!AllZero(s.parent_id)) span["parentSpanId"] = Hex(s.parent_id);
    if (s.error) span["status"] = {{"code", 2}, {"message", s.status_message}};
    out.push_back(std::move(span));
  }
  const json resource{
      {"attributes",
       {{{"key", "service.name"}, {"value", {{"stringValue", std::string(service_name)}}}},
        {{"key", "service.version"}, {"value", {{"stringValue", std::string(service_version)}}}}}}};
  const json request{
      {"resourceSpans",
       {{{"resource", resource}, {"scopeSpans", {{{"scope", {{"name", "vlmd"}}}, {"spans", out}}}}}}}};
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace vlmd::serve::obs
