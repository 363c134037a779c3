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

// The leading request-field path of a parser's message ("messages[2].content[0].image_url.url:
// ..."): lower-case snake_case names joined by '.' and "[N]", then ": ". Empty otherwise (engine
// messages start with capitalized names, or with prose).
std::string FieldPathPrefix(std::string_view message) {
  auto name_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; };
  size_t i = 0;
  while (i < message.size()) {
    if (i == 0 || message[i] == '.') {
      const size_t start = i == 0 ? 0 : i + 1;
      if (start >= message.size() || !(message[start] >= 'a' && message[start] <= 'z')) return "";
      i = start;
      while (i < message.size() && name_char(message[i])) ++i;
    } else if (message[i] == '[') {
      const size_t close = message.find(']', i);
      if (close == std::string_view::npos || close == i + 1) return "";
      for (size_t d = i + 1; d < close; ++d) {
        if (message[d] < '0' || message[d] > '9') return "";
      }
      i = close + 1;
    } else if (message.substr(i, 2) == ": ") {
      return std::string(message.substr(0, i));
    } else {
      return "";
    }
  }
  return "";
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

std::string ErrorParam(const ApiError& error) {
  return error.http_status == 400 ? FieldPathPrefix(error.message) : std::string();
}

std::string ErrorBody(const ApiError& error) {
  const std::string param = ErrorParam(error);
  const nlohmann::json body = {
      {"error",
       {{"message", error.message},
        {"type", error.type},
        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
        {"code", error.code}}}};
  // Messages may quote client bytes; invalid UTF-8 becomes U+FFFD instead of throwing.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vlmd::serve::api
