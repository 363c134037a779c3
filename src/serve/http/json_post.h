// One JSON POST to an http(s) endpoint, for the server's outbound messages (trace spans, drift
// webhooks): the endpoint parsed once, then posted with timeouts, no redirects and verified
// certificates.
#pragma once

#include <memory>
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

// PostJson that another thread can cut short: Cancel() stops the post in flight (its socket is
// shut down) and makes every later Post return "cancelled" at once. For senders whose
// destructor must not wait out a slow receiver. Each post also ends after 2 x timeout_s in all
// ("timeout"): the per-read timeout alone let a receiver trickling a byte per read hold it
// forever.
class CancellablePoster {
 public:
  explicit CancellablePoster(JsonEndpoint endpoint);
  ~CancellablePoster();
  std::string Post(const std::string& body, int timeout_s);
  void Cancel();
  const JsonEndpoint& endpoint() const { return endpoint_; }

 private:
  struct InFlight;
  JsonEndpoint endpoint_;
  std::unique_ptr<InFlight> state_;
};

}  // namespace vlmd::serve
