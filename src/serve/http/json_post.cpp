// JSON POSTs to outbound endpoints (see json_post.h).
#include "serve/http/json_post.h"

#include <httplib.h>

#include "serve/api/image_inputs.h"

namespace vlmd::serve {

Result<JsonEndpoint> ParseJsonEndpoint(std::string_view url) {
  auto parsed = api::internal::ParseHttpUrl(url);
  if (!parsed.ok()) return parsed.status();
  const int port = parsed->port > 0 ? parsed->port : (parsed->scheme == "https" ? 443 : 80);
  const std::string host =
      parsed->host.find(':') != std::string::npos ? "[" + parsed->host + "]" : parsed->host;
  return JsonEndpoint{parsed->scheme + "://" + host + ":" + std::to_string(port),
                      api::internal::RequestPath(url)};
}

std::string PostJson(const JsonEndpoint& endpoint, const std::string& body, int timeout_s) {
  httplib::Client client(endpoint.base);
  client.set_connection_timeout(timeout_s, 0);
  client.set_read_timeout(timeout_s, 0);
  client.set_write_timeout(timeout_s, 0);
  client.set_follow_location(false);
  client.enable_server_certificate_verification(true);
  auto res = client.Post(endpoint.path, body, "application/json");
  if (!res) return httplib::to_string(res.error());
  if (res->status < 200 || res->status >= 300) return "HTTP " + std::to_string(res->status);
  return "";
}

}  // namespace vlmd::serve
