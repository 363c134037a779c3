// libFuzzer target: the same bytes go to ParseChatCompletion, ParseInvokeJson,
// ParseInvokeMultipart, DecodeBase64 and DecodeDataUri, and every error goes through
// FromStatus/ErrorBody. Beyond "no crash", it traps on broken invariants: decoded base64 re-encodes
// to its input, accepted requests respect the limits and have one media marker per image.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "serve/api/errors.h"
#include "serve/api/requests.h"

namespace {

using namespace vlmd::serve::api;  // NOLINT(build/namespaces): test harness

// Small limits so the fuzzer reaches the limit checks with short inputs.
RequestLimits FuzzLimits() {
  RequestLimits l;
  l.max_images = 3;
  l.max_image_bytes = 256;
  l.max_tokens_limit = 100;
  l.max_stop_strings = 2;
  l.max_stop_length = 8;
  l.url_host_allowlist = {"example.com", "[::1]"};
  return l;
}

size_t CountMarkers(std::string_view text) {
  size_t n = 0;
  for (size_t p = text.find(kMediaMarker); p != std::string_view::npos;
       p = text.find(kMediaMarker, p + 1)) {
    ++n;
  }
  return n;
}

void CheckError(const vlmd::Status& s) {
  if (s.ok()) __builtin_trap();
  const ApiError e = FromStatus(s);
  if (e.http_status < 400 || e.http_status > 599 || e.code.empty()) __builtin_trap();
  if (ErrorBody(e).empty()) __builtin_trap();
}

void CheckRequest(const vlmd::Result<GenerationRequest>& r, const RequestLimits& l, bool chat) {
  if (!r.ok()) {
    CheckError(r.status());
    return;
  }
  const GenerationRequest& req = *r;
  const size_t n_images = req.images.size() + req.image_urls.size();
  if (n_images > static_cast<size_t>(l.max_images)) __builtin_trap();
  if (req.image_urls.size() != req.image_url_positions.size()) __builtin_trap();
  for (const std::string& img : req.images) {
    if (img.empty() || img.size() > l.max_image_bytes) __builtin_trap();
  }
  const SamplingRequest& s = req.sampling;
  if (s.max_tokens < 1 || s.max_tokens > l.max_tokens_limit) __builtin_trap();
  if (!(s.temperature >= 0 && s.temperature <= 2) || !(s.top_p >= 0 && s.top_p <= 1))
    __builtin_trap();
  if (s.repeat_last_n < 0) __builtin_trap();
  if (s.top_k < 0 || s.top_logprobs < 0 || s.top_logprobs > 20) __builtin_trap();
  if (s.stop.size() > static_cast<size_t>(l.max_stop_strings)) __builtin_trap();
  for (const std::string& stop : s.stop) {
    if (stop.empty() || stop.size() > l.max_stop_length) __builtin_trap();
  }
  if (req.messages.empty()) __builtin_trap();
  size_t markers = 0;
  for (const ChatMessage& m : req.messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") __builtin_trap();
    markers += CountMarkers(m.text);
  }
  // Chat places every marker itself; invoke allows none (images go first) or one per image.
  if (chat ? markers != n_images : (markers != 0 && markers != n_images)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const RequestLimits limits = FuzzLimits();

  CheckRequest(ParseChatCompletion(bytes, limits), limits, /*chat=*/true);
  CheckRequest(ParseInvokeJson(bytes, limits), limits, /*chat=*/false);
  CheckRequest(ParseInvokeMultipart(bytes, {std::string(bytes.substr(0, 16))}, limits), limits,
               /*chat=*/false);

  const auto b64 = DecodeBase64(bytes, 1 << 16);
  if (b64.ok()) {
    // Strict decoding means one spelling per byte string: re-encoding gives the input back
    // (modulo optional padding).
    std::string again = EncodeBase64(*b64);
    std::string_view input = bytes;
    while (!again.empty() && again.back() == '=') again.pop_back();
    while (!input.empty() && input.back() == '=') input.remove_suffix(1);
    if (again != input) __builtin_trap();
  } else {
    CheckError(b64.status());
  }
  const auto small = DecodeBase64(bytes, 4);
  if (small.ok() && small->size() > 4) __builtin_trap();

  const auto uri = DecodeDataUri(bytes, 256);
  if (uri.ok() && uri->size() > 256) __builtin_trap();
  if (!uri.ok()) CheckError(uri.status());
  return 0;
}
