// Status -> HTTP error (the one mapping, HOUSE rule 4) and the OpenAI-shaped JSON error body.
#include "serve/api/errors.h"

#include <nlohmann/json.hpp>

namespace vlmd::serve::api {
namespace {

struct Mapping {
  int http_status;
  std::string_view code;
};

Mapping MapCode(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return {400, "invalid_request"};
    case StatusCode::kDataLoss: return {400, "invalid_request"};  // corrupt input from the client
    case StatusCode::kNotFound: return {404, "not_found"};        // e.g. an unknown model name
    case StatusCode::kOutOfRange: return {413, "payload_too_large"};
    case StatusCode::kUnimplemented: return {415, "unsupported_media"};
    case StatusCode::kResourceExhausted: return {422, "over_budget"};
    case StatusCode::kCancelled: return {499, "cancelled"};  // nginx's "client closed request"
    case StatusCode::kFailedPrecondition: return {503, "not_ready"};
    case StatusCode::kUnavailable: return {503, "not_ready"};
    case StatusCode::kDeadlineExceeded: return {504, "deadline_exceeded"};
    case StatusCode::kInternal: return {500, "internal_error"};
    case StatusCode::kOk: break;  // not an error: a caller bug, reported as one
  }
  return {500, "internal_error"};
}

}  // namespace

ApiError FromStatus(const Status& status, std::string_view code) {
  const Mapping m = MapCode(status.code());
  ApiError e;
  e.http_status = m.http_status;
  e.type = m.http_status < 500 ? "invalid_request_error" : "server_error";
  e.code = std::string(code.empty() ? m.code : code);
  e.message = status.ok() ? std::string("internal error: an OK status was reported as an error")
                          : status.message();
  return e;
}

std::string ErrorBody(const ApiError& error) {
  const nlohmann::json body = {
      {"error", {{"message", error.message}, {"type", error.type}, {"code", error.code}}}};
  // Messages may quote client bytes; invalid UTF-8 becomes U+FFFD instead of throwing.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vlmd::serve::api
