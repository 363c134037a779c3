// The status line and headers of a reply as the HTTP front writes them.
#pragma once

#include <string>

#include "serve/http/http_message.h"

namespace vlmd::serve {

// Status line and headers of `res` (framing by the caller: `framing` is the Content-Length or
// Transfer-Encoding line).
std::string SerializeHead(const HttpResponse& res, const std::string& framing, bool keep_alive,
                         int request_version);

}  // namespace vlmd::serve
