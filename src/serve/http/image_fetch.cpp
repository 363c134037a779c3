// Image URL fetching over cpp-httplib's client (see image_fetch.h).
#include "serve/http/image_fetch.h"

#include <httplib.h>

#include <chrono>

#include "serve/api/image_inputs.h"

namespace vlmd::serve {
namespace {

// At most `max_bytes` (what is left of the request's limit).
Result<std::string> Fetch(const std::string& url, const FetchOptions& options, size_t max_bytes) {
  VLMD_ASSIGN_OR_RETURN(api::internal::HttpUrl u, api::internal::ParseHttpUrl(url));
  const int port = u.port > 0 ? u.port : (u.scheme == "https" ? 443 : 80);
  const std::string host = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  httplib::Client client(u.scheme + "://" + host + ":" + std::to_string(port));
  client.set_follow_location(false);
  client.set_connection_timeout(options.timeout_s, 0);
  client.set_read_timeout(options.timeout_s, 0);
  client.enable_server_certificate_verification(true);
  std::string body;
  bool too_large = false, too_slow = false;
  // The read timeout bounds each read; this bounds the whole download.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_s);
  auto res = client.Get(api::internal::RequestPath(url), [&](const char* data, size_t n) {
    if (body.size() + n > max_bytes) {
      too_large = true;
      return false;  // stop receiving
    }
    if (std::chrono::steady_clock::now() > deadline) {
      too_slow = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (too_large) {
    return OutOfRangeError("image URL " + url + ": over the limit of " +
                           std::to_string(options.max_bytes) +
                           " bytes for the request's fetched images together");
  }
  if (too_slow) {
    return InvalidArgumentError("image URL " + url + ": download took longer than " +
                                std::to_string(options.timeout_s) + " s");
  }
  if (!res) {
    return InvalidArgumentError("image URL " + url + ": fetch failed (" + httplib::to_string(res.error()) + ")");
  }
  if (res->status >= 300 && res->status < 400) {
    return InvalidArgumentError("image URL " + url + ": redirects are not followed (status " +
                                std::to_string(res->status) + ")");
  }
  if (res->status != 200) {
    return InvalidArgumentError("image URL " + url + ": the server answered " + std::to_string(res->status));
  }
  if (body.empty()) return InvalidArgumentError("image URL " + url + ": empty body");
  return body;
}

}  // namespace

Status FetchImageUrls(api::GenerationRequest* request, const FetchOptions& options) {
  if (request->image_urls.empty()) return Status::Ok();
  const size_t total = request->images.size() + request->image_urls.size();
  std::vector<std::string> merged(total);
  std::vector<bool> filled(total, false);
  size_t left = options.max_bytes;  // for all of the request's URLs: 8 of them took 8 x the limit
  for (size_t i = 0; i < request->image_urls.size(); ++i) {
    const size_t pos = size_t(request->image_url_positions[i]);
    if (pos >= total || filled[pos]) return InternalError("image URL positions are inconsistent");
    VLMD_ASSIGN_OR_RETURN(merged[pos], Fetch(request->image_urls[i], options, left));
    left -= merged[pos].size();
    filled[pos] = true;
  }
  size_t next = 0;
  for (size_t pos = 0; pos < total; ++pos) {
    if (!filled[pos]) merged[pos] = std::move(request->images[next++]);
  }
  request->images = std::move(merged);
  request->image_urls.clear();
  request->image_url_positions.clear();
  return Status::Ok();
}

}  // namespace vlmd::serve
