#include "serve/http/response_head.h"

#include <strings.h>

#include <ostream>  // before Beast's status.hpp, which uses std::ostream without including it

#include <boost/beast/http/status.hpp>
#include <string_view>

namespace vlmd::serve {
namespace {

namespace bhttp = boost::beast::http;

// Header names the front writes itself; a handler's copies are dropped.
bool FrontOwnedHeader(std::string_view name) {
  for (std::string_view owned : {"Content-Length", "Content-Type", "Transfer-Encoding", "Connection"}) {
    if (name.size() == owned.size() && strncasecmp(name.data(), owned.data(), name.size()) == 0) return true;
  }
  return false;
}

bool HasLineBreak(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

}  // namespace

std::string SerializeHead(const HttpResponse& res, const std::string& framing, bool keep_alive,
                          int request_version) {
  std::string out = "HTTP/1.1 " + std::to_string(res.status) + " ";
  out += std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(res.status)));
  out += "\r\n";
  for (const auto& [name, value] : res.headers) {
    // A header that would end the head early or smuggle another is never written.
    if (FrontOwnedHeader(name) || HasLineBreak(name) || HasLineBreak(value) || name.empty()) continue;
    out += name + ": " + value + "\r\n";
  }
  if (!res.content_type.empty() && !HasLineBreak(res.content_type)) {
    out += "Content-Type: " + res.content_type + "\r\n";
  }
  out += framing;
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (request_version == 10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

}  // namespace vlmd::serve
