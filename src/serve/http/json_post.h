// One JSON POST to an http(s) endpoint, for the server's outbound messages (trace spans, drift
// webhooks): the endpoint parsed once, then posted with timeouts, no redirects and verified
// certificates.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace vlmd::serve {

struct JsonEndpoint {
  std::string base;  // scheme://host:port
  std::string path;  // path and query ("/" when the URL has none)
  std::string url() const { return base + path; }
};

// INVALID_ARGUMENT when `url` is not an http(s) URL (api::internal::ParseHttpUrl's rules).
Result<JsonEndpoint> ParseJsonEndpoint(std::string_view url);

// Posts `body` as application/json with `timeout_s` for connect, read and write. Returns "" on
// a 2xx answer, else what went wrong ("HTTP 503", "Connection", ...). Thread-safe.
std::string PostJson(const JsonEndpoint& endpoint, const std::string& body, int timeout_s);

}  // namespace vlmd::serve
