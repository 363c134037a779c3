// Private to serve/api: turning image references (base64, data URIs, http(s) URLs, raw parts)
// into GenerationRequest::images / image_urls under the request limits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api/requests.h"

namespace vlmd::serve::api::internal {

inline constexpr size_t kMaxUrlBytes = 4096;

// The parts of an http(s) URL that matter for the allowlist.
struct HttpUrl {
  std::string scheme;  // "http" or "https" (lowercase)
  std::string host;    // lowercase; an IPv6 literal without its brackets
  int32_t port = -1;   // -1 when absent
};

// Strict parse of "http(s)://host[:port][/path][?query][#fragment]": printable ASCII only, no
// userinfo ("user@"), host made of letters, digits, '-' and '.' (non-empty labels) or a
// bracketed IPv6 literal, port 1..65535. INVALID_ARGUMENT otherwise. Pure; thread-safe.
Result<HttpUrl> ParseHttpUrl(std::string_view url);

// The path and query of an URL that ParseHttpUrl accepted ("/" when it has none), to send in
// the request line; the fragment is the client's and is not sent.
std::string RequestPath(std::string_view url);

// True when `host` (as ParseHttpUrl returns it) equals an allowlist entry, ignoring case and
// brackets around IPv6 literals. Entries are bare hosts (no scheme or port).
bool HostAllowed(std::string_view host, const std::vector<std::string>& allowlist);

// Collects a request's images in marker order, enforcing max_images (OUT_OF_RANGE, checked
// before any decoding) and max_image_bytes (OUT_OF_RANGE, checked before decoding). Every
// error names `path`. Not thread-safe; borrows `limits` and `req` for its lifetime.
class ImageCollector {
 public:
  ImageCollector(const RequestLimits& limits, GenerationRequest* req)
      : limits_(limits), req_(req) {}

  // A plain base64 string, or a data URI (accepted too, as clients often send one).
  Status AddBase64(std::string_view text, const std::string& path);
  // An OpenAI image_url.url: a data: URI (decoded) or an allowlisted http(s) URL (recorded).
  Status AddUrl(std::string_view url, const std::string& path);
  // Already-decoded bytes (multipart parts).
  Status AddBytes(std::string bytes, const std::string& path);

  int32_t count() const { return count_; }

 private:
  Status ReserveSlot(const std::string& path);
  Status AddDecoded(std::string bytes, const std::string& path);

  const RequestLimits& limits_;
  GenerationRequest* req_;
  int32_t count_ = 0;
};

}  // namespace vlmd::serve::api::internal
