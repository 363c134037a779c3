// Hostile input for the request parsers: every truncation of valid bodies, deep nesting, huge
// numbers, wrong types at every field, invalid UTF-8, and bad base64 / data URIs. Each must come
// back as a Status (never a crash, hang or exception), with the expected code.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "serve/api/json_fields.h"
#include "serve/api/requests.h"

namespace vlmd::serve::api {
namespace {

std::string ValidChatBody() {
  return R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[)"
         R"({"type":"text","text":"hi"},)"
         R"({"type":"image_url","image_url":{"url":"data:image/png;base64,)" +
         EncodeBase64("pixels") +
         R"(","detail":"low"}}]}],"max_tokens":8,"stop":["a","b"],)"
         R"("stream":true,"temperature":0.7,"seed":3})";
}

std::string ValidInvokeBody() {
  return R"({"prompt":"hi \u00e9 <__media__>","image_base64":")" + EncodeBase64("pixels") +
         R"(","max_tokens":8,"stop":"x","raw_prompt":false,"stream_id":"cam"})";
}

TEST(ApiHostile, EveryTruncationOfValidBodiesIsAnError) {
  const std::string chat = ValidChatBody();
  const std::string invoke = ValidInvokeBody();
  ASSERT_TRUE(ParseChatCompletion(chat, RequestLimits{}).ok());
  ASSERT_TRUE(ParseInvokeJson(invoke, RequestLimits{}).ok());
  for (size_t n = 0; n < chat.size(); ++n) {
    auto r = ParseChatCompletion(std::string_view(chat).substr(0, n), RequestLimits{});
    ASSERT_FALSE(r.ok()) << "chat prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  }
  for (size_t n = 0; n < invoke.size(); ++n) {
    auto r = ParseInvokeJson(std::string_view(invoke).substr(0, n), RequestLimits{});
    ASSERT_FALSE(r.ok()) << "invoke prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    auto m = ParseInvokeMultipart(std::string_view(invoke).substr(0, n), {"img"}, RequestLimits{});
    if (n > 0) {
      EXPECT_FALSE(m.ok()) << "multipart prefix of " << n << " bytes parsed";
    }
  }
}

TEST(ApiHostile, TruncatedBodyNamesTheJsonError) {
  auto r = ParseChatCompletion(R"({"messages":[{"role":"us)", RequestLimits{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("body: invalid JSON: parse error"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("[json.exception"), std::string::npos);
}

std::string Nested(int depth, const std::string& inner) {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(ApiHostile, DepthLimitIs32Levels) {
  // The body object is level 1; "x" holds 31 more arrays = 32 levels: accepted.
  auto ok = ParseChatCompletion(
      R"({"x":)" + Nested(31, "1") + R"(,"messages":[{"role":"user","content":"q"}]})",
      RequestLimits{});
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  auto deep = ParseChatCompletion(
      R"({"x":)" + Nested(32, "1") + R"(,"messages":[{"role":"user","content":"q"}]})",
      RequestLimits{});
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("nested deeper than 32"), std::string::npos);
}

// Brackets inside strings (escaped quotes included) are text, not nesting.
TEST(ApiHostile, BracketsInStringsDoNotCountAsNesting) {
  const std::string text = std::string(40, '[') + R"(\"{{{{)" + std::string(40, '{');
  auto ok = ParseChatCompletion(
      R"({"x":")" + text + R"(","messages":[{"role":"user","content":"q"}]})", RequestLimits{});
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

// A long array of containers parses whole (the depth bound was a parser callback that rescanned
// the array at every element's end: 200,000 of them took 5.7 s here, 0.1 s since).
TEST(ApiHostile, WideArraysOfContainersParse) {
  std::string wide = R"({"messages":[{"role":"user","content":"q"}],"x":[)";
  constexpr int kElements = 200000;
  for (int i = 0; i < kElements; ++i) wide += i == 0 ? "{}" : ",{}";
  wide += "]}";
  auto j = internal::ParseJsonObject(wide, "body");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["x"].size(), static_cast<size_t>(kElements));
}

TEST(ApiHostile, VeryDeepNestingDoesNotExhaustTheStack) {
  for (int depth : {100000, 1000000}) {
    const std::string arrays = Nested(depth, "");
    EXPECT_EQ(ParseInvokeJson(arrays, RequestLimits{}).status().code(),
              StatusCode::kInvalidArgument);
    std::string objects;
    for (int i = 0; i < depth; ++i) objects += R"({"a":)";
    objects += '1';
    objects.append(static_cast<size_t>(depth), '}');
    EXPECT_EQ(ParseChatCompletion(objects, RequestLimits{}).status().code(),
              StatusCode::kInvalidArgument);
    // Unterminated: the parser must stop at the end, not recurse.
    EXPECT_FALSE(ParseChatCompletion(std::string(depth, '['), RequestLimits{}).ok());
  }
}

TEST(ApiHostile, HugeAndOddNumbers) {
  const std::string msgs = R"("messages":[{"role":"user","content":"q"}])";
  // Literals that overflow double are JSON errors; the rest are range errors naming the field.
  EXPECT_EQ(
      ParseChatCompletion("{" + msgs + R"(,"temperature":1e999})", RequestLimits{}).status().code(),
      StatusCode::kInvalidArgument);
  const std::string overflow(5000, '9');  // beyond double: a JSON error
  auto huge =
      ParseChatCompletion("{" + msgs + R"(,"max_tokens":)" + overflow + "}", RequestLimits{});
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("number overflow"), std::string::npos);
  const std::string digits(300, '9');  // fits double, not any integer type: a bad parameter
  auto big = ParseChatCompletion("{" + msgs + R"(,"max_tokens":)" + digits + "}", RequestLimits{});
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(big.status().message().rfind("max_tokens: ", 0), 0u) << big.status().ToString();
  auto neg = ParseChatCompletion("{" + msgs + R"(,"max_tokens":-)" + digits + "}", RequestLimits{});
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(neg.status().message().rfind("max_tokens: must be at least 1", 0), 0u);
  auto seed = ParseChatCompletion("{" + msgs + R"(,"seed":)" + digits + "}", RequestLimits{});
  EXPECT_EQ(seed.status().message().rfind("seed: larger than", 0), 0u) << seed.status().ToString();
  auto tiny = ParseChatCompletion("{" + msgs + R"(,"temperature":1e-400})", RequestLimits{});
  EXPECT_TRUE(tiny.ok()) << tiny.status().ToString();  // underflows to 0: a valid temperature
  auto neg_zero = ParseChatCompletion("{" + msgs + R"(,"seed":-0})", RequestLimits{});
  ASSERT_TRUE(neg_zero.ok()) << neg_zero.status().ToString();
  EXPECT_EQ(neg_zero->sampling.seed, 0u);
  auto int_min =
      ParseChatCompletion("{" + msgs + R"(,"top_k":-9223372036854775808})", RequestLimits{});
  EXPECT_EQ(int_min.status().code(), StatusCode::kInvalidArgument);
}

// Every field replaced by a value of each wrong type: always INVALID_ARGUMENT naming it.
TEST(ApiHostile, WrongTypesEverywhere) {
  const std::vector<std::string> values = {"true", "\"s\"", "[]", "{}", "1.5", "-1"};
  const std::vector<std::string> fields = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature",
      "top_p", "top_k",    "min_p",      "repeat_penalty",        "seed",
      "stop",  "stream",   "logprobs",   "top_logprobs",          "n"};
  int failures_checked = 0;
  for (const std::string& field : fields) {
    for (const std::string& value : values) {
      std::string body = R"({"messages":[{"role":"user","content":"q"}]})";
      if (field == "messages") {
        body = R"({"messages":)" + value + "}";
      } else {
        body.pop_back();
        body += ",\"" + field + "\":" + value + "}";
      }
      auto r = ParseChatCompletion(body, RequestLimits{});
      if (r.ok()) continue;  // e.g. "top_p": 1.5 is a type match (and a range error below)
      ++failures_checked;
      EXPECT_TRUE(r.status().code() == StatusCode::kInvalidArgument ||
                  r.status().code() == StatusCode::kOutOfRange)
          << body << " -> " << r.status().ToString();
      EXPECT_EQ(r.status().message().rfind(field, 0), 0u) << body << " -> " << r.status().message();
    }
  }
  EXPECT_GT(failures_checked, 70);
  // Message-level fields.
  for (const std::string value : {"true", "1", "[]", "{}", "\"\""}) {
    for (const std::string key : {"role", "content"}) {
      std::string msg = key == "role" ? R"({"role":)" + value + R"(,"content":"q"})"
                                      : R"({"role":"user","content":)" + value + "}";
      auto r = ParseChatCompletion(R"({"messages":[)" + msg + "]}", RequestLimits{});
      if (r.ok()) continue;  // "content": [] and "" are valid (empty) content
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(r.status().message().rfind("messages[0]." + key, 0), 0u) << r.status().message();
    }
  }
}

TEST(ApiHostile, InvalidUtf8IsRefused) {
  const std::string body = "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}";
  EXPECT_EQ(ParseChatCompletion(body, RequestLimits{}).status().code(),
            StatusCode::kInvalidArgument);
  const std::string nul = std::string("{\"prompt\":\"a\0b\"}", 16);
  EXPECT_EQ(ParseInvokeJson(nul, RequestLimits{}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ApiHostile, QuotedClientTextStaysValidUtf8) {
  std::string role = "a";  // then 2-byte characters: byte 48 is the middle of one
  for (int i = 0; i < 40; ++i) role += "\xc3\xa9";
  auto r = ParseChatCompletion(R"({"messages":[{"role":")" + role + R"(","content":"x"}]})",
                               RequestLimits{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown role 'a\xc3\xa9"), std::string::npos);
  EXPECT_NE(r.status().message().find("..."), std::string::npos);
  // The strict dump throws on invalid UTF-8.
  EXPECT_NO_THROW((void)nlohmann::json(r.status().message()).dump());
}

TEST(ApiHostile, DuplicateKeysAndEmptyInputs) {
  EXPECT_FALSE(ParseChatCompletion("", RequestLimits{}).ok());
  EXPECT_FALSE(ParseInvokeJson("   ", RequestLimits{}).ok());
  EXPECT_FALSE(ParseInvokeJson("null", RequestLimits{}).ok());
  EXPECT_FALSE(ParseInvokeJson("\"prompt\"", RequestLimits{}).ok());
  // Duplicate keys: the last one wins (nlohmann's rule), and it is validated like any other.
  EXPECT_EQ(ParseInvokeJson(R"({"prompt":"a","max_tokens":5,"max_tokens":0})", RequestLimits{})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  // JSON comments are not JSON.
  EXPECT_FALSE(ParseInvokeJson(R"({/*c*/"prompt":"a"})", RequestLimits{}).ok());
}

struct Base64Case {
  const char* text;
  const char* why;
};

TEST(ApiHostile, BadBase64InImagesNamesTheField) {
  const std::vector<Base64Case> cases = {
      {"Zm9v!mFy", "invalid character"},
      {"Zm9v YmFy", "invalid character"},
      {"Zm9v\\nYmFy", "invalid character"},
      {"Zm9vY", "truncated"},
      {"Zm9=", "non-zero bits"},
      {"Zm9vYmF", "non-zero bits"},
      {"Zm9vYg=", "padding"},
      {"Z===", "invalid character"},
      {"Zm=9", "invalid character"},
      {"=Zm9", "invalid character"},
      {"Zh==", "non-zero bits"},
      {"Zm9vYmF=", "non-zero bits"},
  };
  for (const Base64Case& c : cases) {
    auto r = ParseInvokeJson(std::string(R"({"prompt":"p","image_base64":")") + c.text + "\"}",
                             RequestLimits{});
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(r.status().message().rfind("image_base64: base64: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(c.why), std::string::npos)
        << c.text << ": " << r.status().message();
  }
}

TEST(ApiHostile, OversizedBase64IsRefusedBeforeDecoding) {
  RequestLimits limits;
  limits.max_image_bytes = 1000;
  // Invalid characters everywhere: an OUT_OF_RANGE answer shows the length check came first.
  const std::string junk(4000, '!');
  auto r = ParseInvokeJson(R"({"prompt":"p","image_base64":")" + junk + "\"}", limits);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << r.status().ToString();
  auto d = ParseInvokeJson(R"({"prompt":"p","image_base64":"data:image/png;base64,)" + junk + "\"}",
                           limits);
  EXPECT_EQ(d.status().code(), StatusCode::kOutOfRange) << d.status().ToString();
}

TEST(ApiHostile, TooManyImagesIsRefusedBeforeDecodingThem) {
  RequestLimits limits;
  limits.max_images = 3;
  std::string list;
  for (int i = 0; i < 1000; ++i) list += std::string(i ? "," : "") + "\"!!!!\"";  // all invalid
  auto r =
      ParseInvokeJson(R"({"prompt":"p","images_base64":[")" + EncodeBase64("a") + "\",\"" +
                          EncodeBase64("b") + "\",\"" + EncodeBase64("c") + "\"," + list + "]}",
                      limits);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << r.status().ToString();
  EXPECT_NE(r.status().message().find("images_base64[3]: too many images"), std::string::npos);
}

}  // namespace
}  // namespace vlmd::serve::api
