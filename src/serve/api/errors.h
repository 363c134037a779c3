// The single mapping from engine/serve Status to HTTP (HOUSE rule 4), and the JSON error body
// every endpoint returns: {"error": {"message", "type", "param", "code"}} (OpenAI's shape).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace vlmd::serve::api {

// An error ready to send: HTTP status, OpenAI-style type and a short machine code.
struct ApiError {
  int http_status = 500;
  std::string type;     // "invalid_request_error", "server_error", "rate_limit_error", ...
  std::string code;     // e.g. "bad_json", "image_too_large", "unsupported_image", "queue_full"
  std::string message;  // human readable; never contains secrets
};

// Status -> ApiError. INVALID_ARGUMENT 400, OUT_OF_RANGE 413 (size limits), DATA_LOSS 400
// (corrupt input), UNIMPLEMENTED 415 (unsupported media), RESOURCE_EXHAUSTED 422 (over budget),
// FAILED_PRECONDITION/UNAVAILABLE 503, DEADLINE_EXCEEDED 504, CANCELLED 499, INTERNAL 500.
// `code` overrides the default machine code derived from the status code when non-empty.
ApiError FromStatus(const Status& status, std::string_view code = {});

// OpenAI's `param`: the request field a 400 is about, when its message starts with the field's
// path and ": " (as the request parsers write them: "messages[0].content: missing"); else empty
// (JSON null).
std::string ErrorParam(const ApiError& error);

// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}} as compact JSON text.
std::string ErrorBody(const ApiError& error);

}  // namespace vlmd::serve::api
