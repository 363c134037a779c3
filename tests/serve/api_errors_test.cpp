// Status -> HTTP mapping (one row per status code) and the JSON error body's shape and escaping.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/api/errors.h"
#include "serve/http/responses.h"

namespace vlmd::serve::api {
namespace {

struct Row {
  StatusCode code;
  int http;
  const char* type;
  const char* machine_code;
};

TEST(ApiErrors, MappingTable) {
  const Row rows[] = {
      {StatusCode::kInvalidArgument, 400, "invalid_request_error", "invalid_request"},
      {StatusCode::kDataLoss, 400, "invalid_request_error", "invalid_request"},
      {StatusCode::kNotFound, 404, "invalid_request_error", "not_found"},
      {StatusCode::kOutOfRange, 413, "invalid_request_error", "payload_too_large"},
      {StatusCode::kUnimplemented, 415, "invalid_request_error", "unsupported_media"},
      {StatusCode::kResourceExhausted, 422, "invalid_request_error", "over_budget"},
      {StatusCode::kCancelled, 499, "invalid_request_error", "cancelled"},
      {StatusCode::kInternal, 500, "server_error", "internal_error"},
      {StatusCode::kFailedPrecondition, 503, "server_error", "not_ready"},
      {StatusCode::kUnavailable, 503, "server_error", "not_ready"},
      {StatusCode::kDeadlineExceeded, 504, "server_error", "deadline_exceeded"},
  };
  for (const Row& row : rows) {
    const ApiError e = FromStatus(Status(row.code, "msg"));
    EXPECT_EQ(e.http_status, row.http) << StatusCodeName(row.code);
    EXPECT_EQ(e.type, row.type) << StatusCodeName(row.code);
    EXPECT_EQ(e.code, row.machine_code) << StatusCodeName(row.code);
    EXPECT_EQ(e.message, "msg");
  }
}

TEST(ApiErrors, CodeOverrideAndOkStatus) {
  const ApiError e = FromStatus(OutOfRangeError("image too big"), "image_too_large");
  EXPECT_EQ(e.http_status, 413);
  EXPECT_EQ(e.code, "image_too_large");
  EXPECT_EQ(e.type, "invalid_request_error");
  const ApiError ok = FromStatus(Status::Ok());  // a caller bug: still a well-formed 500
  EXPECT_EQ(ok.http_status, 500);
  EXPECT_EQ(ok.code, "internal_error");
  EXPECT_FALSE(ok.message.empty());
}

TEST(ApiErrors, BodyIsOpenAiShapedAndEscaped) {
  const std::string msg = "bad \"field\"\n\\ </script> \x01 \xff\xfe end";
  const std::string body = ErrorBody(FromStatus(InvalidArgumentError(msg)));
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << body;
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"].size(), 4u);
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], "invalid_request");
  // Invalid UTF-8 is replaced (U+FFFD), everything else survives the round trip.
  EXPECT_EQ(j["error"]["message"], "bad \"field\"\n\\ </script> \x01 \xEF\xBF\xBD\xEF\xBF\xBD end");
  EXPECT_EQ(body.find('\n'), std::string::npos);  // compact, one line
}

// OpenAI's `param`: the request field a 400 names at the start of its message, else null.
TEST(ApiErrors, ParamNamesTheFieldAtFault) {
  EXPECT_EQ(ErrorParam(FromStatus(InvalidArgumentError("messages[2].content[0].image_url.url: bad"))),
            "messages[2].content[0].image_url.url");
  EXPECT_EQ(ErrorParam(FromStatus(InvalidArgumentError("top_p: must be in [0, 1]"))), "top_p");
  for (const char* msg : {"the prompt needs 9 tokens", "Attention: bad sizes", "x[]: y",
                          "messages[a]: b", "top_p must be", "a.: b", ": b"}) {
    EXPECT_EQ(ErrorParam(FromStatus(InvalidArgumentError(msg))), "") << msg;
  }
  EXPECT_EQ(ErrorParam(FromStatus(ResourceExhaustedError("max_tokens: too many"))), "");  // 422
  const auto j = nlohmann::json::parse(ErrorBody(FromStatus(InvalidArgumentError("seed: bad"))));
  EXPECT_EQ(j["error"]["param"], "seed");
}

// Retry-After in whole seconds, 1 to a day, whatever the limiter computed (a rate of 1e-12/s
// gave a wait past any int).
TEST(RetryAfterHeader, WholeSecondsFromOneToADay) {
  using vlmd::serve::RetryAfterHeader;
  EXPECT_EQ(RetryAfterHeader(0.2), "1");
  EXPECT_EQ(RetryAfterHeader(1.5), "2");
  EXPECT_EQ(RetryAfterHeader(1e12), "86400");
  EXPECT_EQ(RetryAfterHeader(-3), "1");
  EXPECT_EQ(RetryAfterHeader(std::numeric_limits<double>::quiet_NaN()), "1");
  EXPECT_EQ(RetryAfterHeader(std::numeric_limits<double>::infinity()), "86400");
}

}  // namespace
}  // namespace vlmd::serve::api
