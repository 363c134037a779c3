// Request parsing for /v1/chat/completions and /v1/vlm/invoke: bodies shaped as real clients send
// them, every validation rule (code and the field named in the message), and image handling.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/api/requests.h"

namespace vlmd::serve::api {
namespace {

const std::string kPng = std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);

std::string DataUri(const std::string& bytes, const std::string& mime = "image/png") {
  return "data:" + mime + ";base64," + EncodeBase64(bytes);
}

// A chat body with one user text message plus `extra` top-level members ("" for none).
std::string Chat(const std::string& extra) {
  std::string body = R"({"messages":[{"role":"user","content":"hi"}])";
  if (!extra.empty()) body += "," + extra;
  return body + "}";
}

std::string Invoke(const std::string& extra) {
  std::string body = R"({"prompt":"describe")";
  if (!extra.empty()) body += "," + extra;
  return body + "}";
}

// Expects failure with `code` and a message containing `needle` (the field path, usually).
template <typename T>
void ExpectError(const Result<T>& r, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(ApiChat, OpenAiNpmClientBody) {
  // Member order and extras as the openai npm client (v4) serializes a streaming vision request.
  const std::string body =
      R"({"messages":[{"role":"system","content":"You are terse."},)"
      R"({"role":"user","content":[{"type":"text","text":"What is "},)"
      R"({"type":"image_url","image_url":{"url":")" +
      DataUri(kPng) +
      R"(","detail":"auto"}},)"
      R"({"type":"text","text":" this?"}]},)"
      R"({"role":"assistant","content":"A logo."},{"role":"user","content":"Sure?"}],)"
      R"("model":"smolvlm","max_tokens":64,"stream":true,"stream_options":{"include_usage":true},)"
      R"("stop":"x","temperature":0.2,"top_p":0.9,"seed":42,"user":"u-1","n":1,)"
      R"("frequency_penalty":0,"presence_penalty":0,"logprobs":true,"top_logprobs":3})";
  auto r = ParseChatCompletion(body, RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "smolvlm");
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].text, "You are terse.");
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].text, "What is <__media__> this?");
  EXPECT_EQ(r->messages[2].role, "assistant");
  EXPECT_EQ(r->messages[3].text, "Sure?");
  ASSERT_EQ(r->images.size(), 1u);
  EXPECT_EQ(r->images[0], kPng);
  EXPECT_TRUE(r->image_urls.empty());
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->sampling.max_tokens, 64);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.2f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_TRUE(r->sampling.has_seed);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->sampling.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r->sampling.logprobs);
  EXPECT_EQ(r->sampling.top_logprobs, 3);
  EXPECT_FALSE(r->raw_prompt);
}

TEST(ApiChat, DefaultsWhenFieldsAbsentOrNull) {
  auto r = ParseChatCompletion(
      Chat(R"("temperature":null,"max_tokens":null,"stop":null,"seed":null,"model":null)"),
      RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SamplingRequest defaults;
  EXPECT_EQ(r->model, "");
  EXPECT_EQ(r->sampling.max_tokens, defaults.max_tokens);
  EXPECT_EQ(r->sampling.temperature, defaults.temperature);
  EXPECT_EQ(r->sampling.top_p, defaults.top_p);
  EXPECT_FALSE(r->sampling.has_seed);
  EXPECT_TRUE(r->sampling.stop.empty());
  EXPECT_FALSE(r->stream);
}

TEST(ApiChat, DefaultMaxTokensRespectsASmallerLimit) {
  RequestLimits limits;
  limits.max_tokens_limit = 16;
  auto r = ParseChatCompletion(Chat(""), limits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.max_tokens, 16);
}

TEST(ApiChat, StopArrayAndAllSamplingFields) {
  auto r =
      ParseChatCompletion(Chat(R"("stop":["a","b"],"top_k":40,"min_p":0.05,"repeat_penalty":1.1,)"
                               R"("max_completion_tokens":7,"seed":18446744073709551615)"),
                          RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sampling.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r->sampling.max_tokens, 7);
  EXPECT_EQ(r->sampling.seed, 18446744073709551615u);
}

TEST(ApiChat, IntegralFloatsAreIntegers) {
  auto r = ParseChatCompletion(Chat(R"("max_tokens":32.0,"seed":7e0,"n":1.0)"), RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sampling.max_tokens, 32);
  EXPECT_EQ(r->sampling.seed, 7u);
}

TEST(ApiChat, MaxCompletionTokensWinsOverMaxTokens) {
  auto r =
      ParseChatCompletion(Chat(R"("max_tokens":5,"max_completion_tokens":9)"), RequestLimits{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.max_tokens, 9);
}

// Null content is empty content in every role (llama.cpp's common_chat_msgs_parse_oaicompat);
// a missing one only in an assistant turn (a user turn without it is a 400, below).
TEST(ApiChat, DeveloperRoleIsSystemAndNullContentIsEmpty) {
  auto r = ParseChatCompletion(
      R"({"messages":[{"role":"developer","content":"rules"},{"role":"user","content":"q"},)"
      R"({"role":"assistant","content":null},{"role":"user","content":null}]})",
      RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[2].role, "assistant");
  EXPECT_EQ(r->messages[2].text, "");
  EXPECT_EQ(r->messages[3].role, "user");
  EXPECT_EQ(r->messages[3].text, "");
}

TEST(ApiChat, ImagesInMarkerOrderAcrossMessagesAndBareStringImageUrl) {
  const std::string a = "AAAA-image", b = "BBBB-image", c = "CC";
  const std::string body =
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":")" +
      DataUri(a) + R"("}},{"type":"image_url","image_url":")" + DataUri(b, "image/jpeg") +
      R"("}]},{"role":"assistant","content":"ok"},{"role":"user","content":[)"
      R"({"type":"text","text":"and"},{"type":"image_url","image_url":{"url":")" +
      DataUri(c, "") + R"("}}]}]})";
  auto r = ParseChatCompletion(body, RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[0].text, "<__media__><__media__>");
  EXPECT_EQ(r->messages[2].text, "and<__media__>");
  EXPECT_EQ(r->images, (std::vector<std::string>{a, b, c}));
}

// Consecutive text parts are joined with a newline, as llama.cpp joins them (they ran together);
// a part next to an image marker is not.
TEST(ApiChat, ConsecutiveTextPartsAreJoinedWithANewline) {
  const std::string body =
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"Describe the scene."},)"
      R"({"type":"text","text":"Answer briefly."},{"type":"image_url","image_url":{"url":")" +
      DataUri("AA") + R"("}},{"type":"text","text":"Now."}]}]})";
  auto r = ParseChatCompletion(body, RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[0].text, "Describe the scene.\nAnswer briefly.<__media__>Now.");
  // So a marker split across two text parts never forms (it was refused; now it is text).
  auto split = ParseChatCompletion(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"<__med"},{"type":"text","text":"ia__>"}]}]})",
      RequestLimits{});
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->messages[0].text, "<__med\nia__>");
  EXPECT_TRUE(split->images.empty());
  // Nothing before: no newline (llama.cpp joins only after text).
  auto leading = ParseChatCompletion(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"b"}]}]})",
      RequestLimits{});
  ASSERT_TRUE(leading.ok()) << leading.status().ToString();
  EXPECT_EQ(leading->messages[0].text, "b");
}

TEST(ApiChat, ImageUrlsNeedTheAllowlist) {
  const std::string body = R"({"messages":[{"role":"user","content":[{"type":"image_url",)"
                           R"("image_url":{"url":"https://img.example.com/a.png"}}]}]})";
  ExpectError(ParseChatCompletion(body, RequestLimits{}), StatusCode::kInvalidArgument,
              "messages[0].content[0].image_url.url: image URLs are not allowed (configure an "
              "allowlist)");

  RequestLimits limits;
  limits.url_host_allowlist = {"other.example.com"};
  ExpectError(ParseChatCompletion(body, limits), StatusCode::kInvalidArgument,
              "'img.example.com' is not in the allowlist");

  limits.url_host_allowlist = {"IMG.example.com"};
  auto r = ParseChatCompletion(body, limits);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->image_urls, std::vector<std::string>{"https://img.example.com/a.png"});
  EXPECT_EQ(r->image_url_positions, std::vector<int32_t>{0});
  EXPECT_TRUE(r->images.empty());
  EXPECT_EQ(r->messages[0].text, "<__media__>");
}

TEST(ApiChat, UrlAndDataImagesKeepTheirMarkerPositions) {
  RequestLimits limits;
  limits.url_host_allowlist = {"cams.local"};
  const std::string body =
      R"({"messages":[{"role":"user","content":[)"
      R"({"type":"image_url","image_url":{"url":")" +
      DataUri("first") +
      R"("}},)"
      R"({"type":"image_url","image_url":{"url":"http://cams.local:8080/snap.jpg?x=1"}},)"
      R"({"type":"image_url","image_url":{"url":")" +
      DataUri("third") + R"("}}]}]})";
  auto r = ParseChatCompletion(body, limits);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->images, (std::vector<std::string>{"first", "third"}));
  EXPECT_EQ(r->image_url_positions, std::vector<int32_t>{1});
}

TEST(ApiChat, AllowlistIsNotFooledByUserInfoOrBackslashes) {
  RequestLimits limits;
  limits.url_host_allowlist = {"good.com"};
  for (const char* url : {"http://good.com@evil.com/x.png", "http://good.com\\\\@evil.com/",
                          "http://evil.com#@good.com", "http://good.com.evil.com/",
                          "ftp://good.com/x", "http://good.com:99999/", "http://good..com/",
                          "http://[::1/", "http:/good.com/", "http://good.com /"}) {
    const std::string body =
        std::string(R"({"messages":[{"role":"user","content":[{"type":"image_url",)") +
        R"("image_url":{"url":")" + url + R"("}}]}]})";
    auto r = ParseChatCompletion(body, limits);
    EXPECT_FALSE(r.ok()) << url;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << url;
      EXPECT_NE(r.status().message().find("messages[0].content[0].image_url.url"),
                std::string::npos)
          << r.status().ToString();
    }
  }
}

TEST(ApiChat, TooManyImagesAndOversizedImages) {
  RequestLimits limits;
  limits.max_images = 2;
  limits.max_image_bytes = 10;
  auto part = [](const std::string& bytes) {
    return R"({"type":"image_url","image_url":{"url":")" + DataUri(bytes) + R"("}})";
  };
  const std::string two =
      R"({"messages":[{"role":"user","content":[)" + part("1234567890") + "," + part("x") + "]}]}";
  ASSERT_TRUE(ParseChatCompletion(two, limits).ok());
  const std::string three = R"({"messages":[{"role":"user","content":[)" + part("a") + "," +
                            part("b") + "]},{\"role\":\"user\",\"content\":[" + part("c") + "]}]}";
  ExpectError(ParseChatCompletion(three, limits), StatusCode::kOutOfRange,
              "messages[1].content[0].image_url.url: too many images");
  const std::string big =
      R"({"messages":[{"role":"user","content":[)" + part("12345678901") + "]}]}";
  ExpectError(ParseChatCompletion(big, limits), StatusCode::kOutOfRange,
              "messages[0].content[0].image_url.url: data URI: decoded size 11 bytes exceeds");
}

struct RuleCase {
  std::string extra;  // members added to a valid chat body
  StatusCode code;
  std::string message;  // expected substring of the message
};

class ApiSamplingRules : public ::testing::TestWithParam<RuleCase> {};

TEST_P(ApiSamplingRules, ChatAndInvokeAgree) {
  const RuleCase& c = GetParam();
  ExpectError(ParseChatCompletion(Chat(c.extra), RequestLimits{}), c.code, c.message);
  ExpectError(ParseInvokeJson(Invoke(c.extra), RequestLimits{}), c.code, c.message);
}

INSTANTIATE_TEST_SUITE_P(
    All, ApiSamplingRules,
    ::testing::Values(
        RuleCase{R"("max_tokens":0)", StatusCode::kInvalidArgument,
                 "max_tokens: must be at least 1"},
        RuleCase{R"("max_tokens":-5)", StatusCode::kInvalidArgument,
                 "max_tokens: must be at least 1"},
        RuleCase{R"("max_tokens":4097)", StatusCode::kInvalidArgument,
                 "max_tokens: 4097 exceeds the limit of 4096"},
        RuleCase{R"("max_tokens":1e300)", StatusCode::kInvalidArgument, "max_tokens: "},
        RuleCase{R"("max_tokens":99999999999999999999999)", StatusCode::kInvalidArgument, "max_tokens"},
        RuleCase{R"("max_tokens":1.5)", StatusCode::kInvalidArgument, "max_tokens: not an integer"},
        RuleCase{R"("max_tokens":"64")", StatusCode::kInvalidArgument,
                 "max_tokens: not an integer"},
        RuleCase{R"("max_tokens":true)", StatusCode::kInvalidArgument,
                 "max_tokens: not an integer"},
        RuleCase{R"("max_completion_tokens":0)", StatusCode::kInvalidArgument,
                 "max_completion_tokens: must be at least 1"},
        RuleCase{R"("temperature":-0.1)", StatusCode::kInvalidArgument,
                 "temperature: must be in [0, 2]"},
        RuleCase{R"("temperature":2.01)", StatusCode::kInvalidArgument,
                 "temperature: must be in [0, 2]"},
        RuleCase{R"("temperature":"hot")", StatusCode::kInvalidArgument,
                 "temperature: not a number"},
        RuleCase{R"("top_p":-0.1)", StatusCode::kInvalidArgument, "top_p: must be in [0, 1]"},
        RuleCase{R"("top_p":1.0001)", StatusCode::kInvalidArgument, "top_p: must be in [0, 1]"},
        RuleCase{R"("top_k":-1)", StatusCode::kInvalidArgument, "top_k: must be at least 0"},
        RuleCase{R"("top_k":0.5)", StatusCode::kInvalidArgument, "top_k: not an integer"},
        RuleCase{R"("min_p":1.5)", StatusCode::kInvalidArgument, "min_p: must be in [0, 1]"},
        RuleCase{R"("min_p":-0.5)", StatusCode::kInvalidArgument, "min_p: must be in [0, 1]"},
        RuleCase{R"("repeat_penalty":0)", StatusCode::kInvalidArgument,
                 "repeat_penalty: must be in"},
        // Near float's smallest the penalized logits were infinite (NaN probabilities).
        RuleCase{R"("repeat_penalty":1e-40)", StatusCode::kInvalidArgument,
                 "repeat_penalty: must be in [0.001, 10]"},
        RuleCase{R"("seed":-1.5)", StatusCode::kInvalidArgument, "seed: not an integer"},
        RuleCase{R"("repeat_last_n":-2)", StatusCode::kInvalidArgument,
                 "repeat_last_n: must be at least -1"},
        RuleCase{R"("n_predict":0)", StatusCode::kInvalidArgument, "n_predict: must be at least 1"},
        RuleCase{R"("mirostat":2)", StatusCode::kInvalidArgument,
                 "mirostat: mirostat sampling is not supported"},
        RuleCase{R"("typical_p":0.5)", StatusCode::kInvalidArgument,
                 "typical_p: typical sampling is not supported"},
        RuleCase{R"("seed":1.25)", StatusCode::kInvalidArgument, "seed: not an integer"},
        RuleCase{R"("seed":1e30)", StatusCode::kInvalidArgument, "seed: larger than"},
        RuleCase{R"("seed":"42")", StatusCode::kInvalidArgument, "seed: not an integer"},
        RuleCase{R"("stop":5)", StatusCode::kInvalidArgument, "stop: not a string or an array"},
        RuleCase{R"("stop":["a",1])", StatusCode::kInvalidArgument, "stop[1]: not a string"},
        RuleCase{R"("stop":"")", StatusCode::kInvalidArgument, "stop: empty stop string"},
        RuleCase{R"("stop":["1","2","3","4","5","6","7","8","9"])", StatusCode::kInvalidArgument,
                 "stop: at most 8 stop strings"},
        RuleCase{"\"stop\":[\"ok\",\"" + std::string(65, 'x') + "\"]", StatusCode::kInvalidArgument,
                 "stop[1]: longer than 64 bytes"},
        RuleCase{R"("logprobs":1)", StatusCode::kInvalidArgument, "logprobs: not a boolean"},
        RuleCase{R"("logprobs":true,"top_logprobs":21)", StatusCode::kInvalidArgument,
                 "top_logprobs: must be in [0, 20]"},
        RuleCase{R"("logprobs":true,"top_logprobs":-1)", StatusCode::kInvalidArgument,
                 "top_logprobs: must be in [0, 20]"},
        RuleCase{R"("top_logprobs":2)", StatusCode::kInvalidArgument,
                 "top_logprobs: requires \"logprobs\": true"},
        RuleCase{R"("stream":"yes")", StatusCode::kInvalidArgument, "stream: not a boolean"},
        RuleCase{R"("n":2)", StatusCode::kInvalidArgument, "n: only n=1 is supported"},
        RuleCase{R"("n":0)", StatusCode::kInvalidArgument, "n: only n=1 is supported"},
        RuleCase{R"("model":7)", StatusCode::kInvalidArgument, "model: not a string"},
        RuleCase{"\"model\":\"" + std::string(257, 'm') + "\"", StatusCode::kInvalidArgument,
                 "model: longer than 256 bytes"}));

// As OpenAI and llama.cpp take them: top_p 0 (the most likely token), any 64-bit seed (-1:
// llama.cpp's "random", as absent), llama.cpp's n_predict (below max_tokens; -1: the default) and
// repeat_last_n (-1: the whole context), and its mirostat / typical_p at their "off" values.
TEST(ApiChat, OpenAiAndLlamaCppValuesAreAccepted) {
  auto r = ParseChatCompletion(Chat(R"("top_p":0,"seed":-5,"n_predict":3,"repeat_last_n":-1,)"
                                    R"("mirostat":0,"typical_p":1)"),
                               RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sampling.top_p, 0.0f);
  EXPECT_TRUE(r->sampling.has_seed);
  EXPECT_EQ(r->sampling.seed, static_cast<uint64_t>(int64_t{-5}));
  EXPECT_EQ(r->sampling.max_tokens, 3);
  EXPECT_TRUE(r->sampling.has_max_tokens);
  EXPECT_EQ(r->sampling.repeat_last_n, 2147483647);
  auto random = ParseChatCompletion(Chat(R"("seed":-1,"n_predict":-1,"max_tokens":9)"), RequestLimits{});
  ASSERT_TRUE(random.ok()) << random.status().ToString();
  EXPECT_FALSE(random->sampling.has_seed);
  EXPECT_EQ(random->sampling.max_tokens, 9);  // max_tokens wins over n_predict
  // The same values written as floats (clients that keep every number as a double).
  auto as_floats = ParseChatCompletion(Chat(R"("seed":-1.0)"), RequestLimits{});
  ASSERT_TRUE(as_floats.ok()) << as_floats.status().ToString();
  EXPECT_FALSE(as_floats->sampling.has_seed);
  auto minus_five = ParseChatCompletion(Chat(R"("seed":-5.0)"), RequestLimits{});
  ASSERT_TRUE(minus_five.ok()) << minus_five.status().ToString();
  EXPECT_EQ(minus_five->sampling.seed, static_cast<uint64_t>(int64_t{-5}));
  auto defaults = ParseChatCompletion(Chat(R"("n_predict":-1,"repeat_last_n":0)"), RequestLimits{});
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_FALSE(defaults->sampling.has_max_tokens);
  EXPECT_EQ(defaults->sampling.repeat_last_n, 0);
}

TEST(ApiChat, BoundaryValuesAreAccepted) {
  auto r = ParseChatCompletion(
      Chat(R"("max_tokens":4096,"temperature":2,"top_p":1,"min_p":0,"top_k":0,"seed":0,)"
           R"("logprobs":false,"top_logprobs":0,"stop":[])"),
      RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sampling.max_tokens, 4096);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 2.0f);
  EXPECT_TRUE(r->sampling.has_seed);
  auto one = ParseChatCompletion(Chat(R"("max_tokens":1,"top_k":1e12)"), RequestLimits{});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->sampling.max_tokens, 1);
  EXPECT_EQ(one->sampling.top_k, 2147483647);  // "larger than any vocabulary" is kept as off
}

// {"messages": [{"role": <role>, "content": [<parts>]}]}, and the same after a first message.
std::string Parts(const std::string& role, const std::string& parts) {
  return R"({"messages":[{"role":")" + role + R"(","content":[)" + parts + "]}]}";
}
std::string SecondParts(const std::string& parts) {
  return R"({"messages":[{"role":"user","content":"x"},{"role":"user","content":[)" + parts +
         "]}]}";
}

struct ChatCase {
  std::string body;
  std::string message;  // expected substring (always INVALID_ARGUMENT)
};

class ApiChatRules : public ::testing::TestWithParam<ChatCase> {};

TEST_P(ApiChatRules, NamesTheField) {
  ExpectError(ParseChatCompletion(GetParam().body, RequestLimits{}), StatusCode::kInvalidArgument,
              GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    All, ApiChatRules,
    ::testing::Values(
        ChatCase{R"({})", "messages: missing"},
        ChatCase{R"({"messages":{}})", "messages: not an array"},
        ChatCase{R"({"messages":[]})", "messages: must not be empty"},
        ChatCase{R"({"messages":["hi"]})", "messages[0]: not an object"},
        ChatCase{R"({"messages":[{"content":"hi"}]})", "messages[0].role: missing"},
        ChatCase{R"({"messages":[{"role":1,"content":"hi"}]})", "messages[0].role: not a string"},
        ChatCase{R"({"messages":[{"role":"user","content":"a"},{"role":"tool","content":"x"}]})",
                 "messages[1].role: 'tool' messages are not supported"},
        ChatCase{R"({"messages":[{"role":"function","content":"x"}]})",
                 "messages[0].role: 'function' messages are not supported"},
        ChatCase{R"({"messages":[{"role":"robot","content":"x"}]})",
                 "messages[0].role: unknown role 'robot'"},
        ChatCase{R"({"messages":[{"role":"user"}]})", "messages[0].content: missing"},
        ChatCase{R"({"messages":[{"role":"user","content":5}]})",
                 "messages[0].content: not a string or an array"},
        ChatCase{R"({"messages":[{"role":"user","content":["x"]}]})",
                 "messages[0].content[0]: not an object"},
        ChatCase{R"({"messages":[{"role":"user","content":[{"text":"x"}]}]})",
                 "messages[0].content[0].type: missing"},
        ChatCase{R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})",
                 "messages[0].content[0].type: unsupported content part type 'input_audio'"},
        ChatCase{R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})",
                 "messages[0].content[0].text: missing"},
        ChatCase{R"({"messages":[{"role":"user","content":[{"type":"text","text":["a"]}]}]})",
                 "messages[0].content[0].text: not a string"},
        ChatCase{SecondParts(R"({"type":"image_url"})"),
                 "messages[1].content[0].image_url: missing"},
        ChatCase{R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":7}]}]})",
                 "messages[0].content[0].image_url: not an object"},
        ChatCase{Parts("user", R"({"type":"image_url","image_url":{}})"),
                 "messages[0].content[0].image_url.url: missing"},
        ChatCase{SecondParts(
                     R"({"type":"text","text":"a"},{"type":"image_url","image_url":{"url":42}})"),
                 "messages[1].content[1].image_url.url: not a string"},
        ChatCase{Parts("user", R"({"type":"image_url","image_url":{"url":"file:///etc/passwd"}})"),
                 "messages[0].content[0].image_url.url: unsupported URL scheme"},
        ChatCase{
            Parts("assistant", R"({"type":"image_url","image_url":{"url":"data:;base64,AA=="}})"),
            "messages[0].content[0]: image parts are only allowed in user messages"},
        ChatCase{R"({"messages":[{"role":"user","content":"look <__media__> here"}]})",
                 "messages[0].content: must not contain <__media__>"},
        ChatCase{Parts("user", R"({"type":"text","text":"<__media__>"})"),
                 "messages[0].content[0].text: must not contain <__media__>"},
        ChatCase{
            Parts("user", R"({"type":"image_url","image_url":{"url":"data:image/png;base64,"}})"),
            "messages[0].content[0].image_url.url: empty image"},
        ChatCase{Parts("user", R"({"type":"image_url","image_url":{"url":"data:image/png,abc"}})"),
                 "messages[0].content[0].image_url.url: data URI: only ';base64'"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})",
                 "tools: tool calling is not supported"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"auto"})",
                 "tool_choice: tool calling is not supported"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"functions":[{}]})",
                 "functions: tool calling"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})",
                 "response_format: a response format other than"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"42":5}})",
                 "logit_bias: logit bias is not supported"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"audio":{"voice":"x"}})",
                 "audio: audio output"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"modalities":["text","audio"]})",
                 "modalities: an output modality other than text"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"prediction":{"type":"content"}})",
                 "prediction: predicted output"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":2})",
                 "presence_penalty: a presence penalty other than 0"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}],"frequency_penalty":-1})",
                 "frequency_penalty: a frequency penalty other than 0"},
        ChatCase{R"([{"role":"user","content":"x"}])", "body: not a JSON object"},
        ChatCase{R"({"messages":[{"role":"user","content":"x"}]} trailing)",
                 "body: invalid JSON"}));

// Unimplemented OpenAI fields at their no-op values (or null, "not given") are accepted, as are
// harmless fields vlmd does not use.
TEST(ApiChat, UnimplementedFieldsAtNoOpValuesAreAccepted) {
  auto r = ParseChatCompletion(
      R"({"messages":[{"role":"user","content":"x"}],"n":1,"tools":[],"tool_choice":"none",
          "functions":null,"response_format":{"type":"text"},"logit_bias":{},"audio":null,
          "modalities":["text"],"prediction":null,"user":"u1","store":false,"metadata":{"a":"b"}})",
      RequestLimits{});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

TEST(ApiInvoke, PromptWithImages) {
  const std::string body = R"({"prompt":"What is this?","image_base64":")" + EncodeBase64(kPng) +
                           R"(","images_base64":[")" + EncodeBase64("second") + R"(",")" +
                           DataUri("third") +
                           R"("],"max_tokens":20,"temperature":0.5,)"
                           R"("stream":true,"raw_prompt":true,"stream_id":"cam-7","stream_frame":41,"logprobs":true,)"
                           R"("model":"m","unknown_extra":{"x":[1,2]}})";
  auto r = ParseInvokeJson(body, RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0].role, "user");
  EXPECT_EQ(r->messages[0].text, "What is this?");  // no markers: the engine puts images first
  EXPECT_EQ(r->images, (std::vector<std::string>{kPng, "second", "third"}));
  EXPECT_EQ(r->sampling.max_tokens, 20);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->raw_prompt);
  EXPECT_EQ(r->stream_id, "cam-7");
  EXPECT_EQ(r->stream_frame, 41);
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->sampling.logprobs);
}

TEST(ApiInvoke, MarkersMustMatchImages) {
  const std::string img = EncodeBase64("img");
  auto ok = ParseInvokeJson(R"({"prompt":"a <__media__> b","image_base64":")" + img + R"("})",
                            RequestLimits{});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->messages[0].text, "a <__media__> b");
  ExpectError(
      ParseInvokeJson(R"({"prompt":"<__media__><__media__>","image_base64":")" + img + R"("})",
                      RequestLimits{}),
      StatusCode::kInvalidArgument, "prompt: has 2 <__media__> markers for 1 images");
  ExpectError(ParseInvokeJson(R"({"prompt":"<__media__>"})", RequestLimits{}),
              StatusCode::kInvalidArgument, "prompt: has 1");
}

TEST(ApiInvoke, EmptyPromptOnlyWithAnImage) {
  ExpectError(ParseInvokeJson(R"({"prompt":""})", RequestLimits{}), StatusCode::kInvalidArgument,
              "prompt: must not be empty without an image");
  auto r = ParseInvokeJson(R"({"prompt":"","image_base64":")" + EncodeBase64("x") + R"("})",
                           RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[0].text, "");
}

TEST(ApiInvoke, FieldRules) {
  const RequestLimits l;
  ExpectError(ParseInvokeJson(R"({"image_base64":"AAAA"})", l), StatusCode::kInvalidArgument,
              "prompt: missing");
  ExpectError(ParseInvokeJson(R"({"prompt":["a"]})", l), StatusCode::kInvalidArgument,
              "prompt: not a string");
  ExpectError(ParseInvokeJson(Invoke(R"("image_base64":12)"), l), StatusCode::kInvalidArgument,
              "image_base64: not a string");
  ExpectError(ParseInvokeJson(Invoke(R"("images_base64":"AAAA")"), l), StatusCode::kInvalidArgument,
              "images_base64: not an array");
  ExpectError(ParseInvokeJson(Invoke(R"("images_base64":["AAAA",null])"), l),
              StatusCode::kInvalidArgument, "images_base64[1]: not a string");
  ExpectError(ParseInvokeJson(Invoke(R"("images_base64":["AAAA","AA!A"])"), l),
              StatusCode::kInvalidArgument, "images_base64[1]: base64: invalid character 0x21");
  ExpectError(ParseInvokeJson(Invoke(R"("image_base64":"")"), l), StatusCode::kInvalidArgument,
              "image_base64: empty image");
  ExpectError(ParseInvokeJson(Invoke(R"("raw_prompt":"true")"), l), StatusCode::kInvalidArgument,
              "raw_prompt: not a boolean");
  ExpectError(ParseInvokeJson(Invoke(R"("stream_id":3)"), l), StatusCode::kInvalidArgument,
              "stream_id: not a string");
  ExpectError(ParseInvokeJson(Invoke(R"("stream_id":"a b")"), l), StatusCode::kInvalidArgument,
              "stream_id: only printable ASCII");
  ExpectError(ParseInvokeJson(Invoke(R"("stream_id":"")"), l), StatusCode::kInvalidArgument,
              "stream_id: must be 1 to 128 bytes");
  ExpectError(ParseInvokeJson(Invoke(R"("stream_frame":3)"), l), StatusCode::kInvalidArgument,
              "stream_frame: needs a stream_id");
  ExpectError(ParseInvokeJson(Invoke(R"("stream_id":"c","stream_frame":-1)"), l),
              StatusCode::kInvalidArgument, "stream_frame: must not be negative");
  ExpectError(ParseInvokeJson(Invoke(R"("stream_id":"c","stream_frame":1.5)"), l),
              StatusCode::kInvalidArgument, "stream_frame: not an integer");
}

TEST(ApiInvoke, ImageLimits) {
  RequestLimits limits;
  limits.max_images = 2;
  limits.max_image_bytes = 6;
  const std::string six = EncodeBase64("123456"), seven = EncodeBase64("1234567");
  ASSERT_TRUE(
      ParseInvokeJson(Invoke(R"("images_base64":[")" + six + R"(",")" + six + R"("])"), limits)
          .ok());
  ExpectError(ParseInvokeJson(Invoke(R"("image_base64":")" + six + R"(","images_base64":[")" + six +
                                     R"(",")" + six + R"("])"),
                              limits),
              StatusCode::kOutOfRange, "images_base64[1]: too many images (the limit is 2");
  ExpectError(ParseInvokeJson(Invoke(R"("image_base64":")" + seven + R"(")"), limits),
              StatusCode::kOutOfRange,
              "image_base64: decoded size 7 bytes exceeds the limit of 6 bytes");
}

TEST(ApiInvokeMultipart, RequestPartAndImages) {
  auto r = ParseInvokeMultipart(R"({"prompt":"hi <__media__>","max_tokens":3,"stream_id":"c1"})",
                                {kPng}, RequestLimits{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[0].text, "hi <__media__>");
  EXPECT_EQ(r->images, std::vector<std::string>{kPng});
  EXPECT_EQ(r->sampling.max_tokens, 3);
  EXPECT_EQ(r->stream_id, "c1");

  auto empty_json = ParseInvokeMultipart("", {kPng}, RequestLimits{});
  ASSERT_TRUE(empty_json.ok()) << empty_json.status().ToString();
  EXPECT_EQ(empty_json->messages[0].text, "");
}

TEST(ApiInvokeMultipart, PartsSortedByNameAndUnknownPartsRefused) {
  auto sorted = SortMultipartParts({{"image2", "c"}, {"image", "a"}, {"request", "{}"},
                                    {"image10", "d"}, {"image", "b"}, {"image0", "z"}});
  ASSERT_TRUE(sorted.ok()) << sorted.status().ToString();
  EXPECT_EQ(sorted->request_json, "{}");
  // "image" parts as sent, then image<N> by N (10 after 2, not between 1 and 2).
  EXPECT_EQ(sorted->images, (std::vector<std::string>{"a", "b", "z", "c", "d"}));
  EXPECT_TRUE(SortMultipartParts({})->images.empty());
  ExpectError(SortMultipartParts({{"img", "x"}}), StatusCode::kInvalidArgument,
              "multipart: unknown part 'img'");
  ExpectError(SortMultipartParts({{"imagefile", "x"}}), StatusCode::kInvalidArgument,
              "unknown part 'imagefile'");
  ExpectError(SortMultipartParts({{"request", "{}"}, {"request", "{}"}}),
              StatusCode::kInvalidArgument, "more than one \"request\" part");
}

TEST(ApiInvokeMultipart, Rules) {
  RequestLimits limits;
  limits.max_images = 1;
  limits.max_image_bytes = 4;
  ExpectError(ParseInvokeMultipart("", {}, limits), StatusCode::kInvalidArgument,
              "request.prompt: must not be empty without an image");
  ExpectError(ParseInvokeMultipart(R"({"prompt":"x","image_base64":"AAAA"})", {}, limits),
              StatusCode::kInvalidArgument, "request.image_base64: not allowed in multipart");
  ExpectError(ParseInvokeMultipart(R"({"prompt":"x","max_tokens":0})", {}, limits),
              StatusCode::kInvalidArgument, "request.max_tokens: must be at least 1");
  ExpectError(ParseInvokeMultipart(R"({"prompt":"x"})", {"a", "b"}, limits),
              StatusCode::kOutOfRange, "image[1]: too many images");
  ExpectError(ParseInvokeMultipart(R"({"prompt":"x"})", {"12345"}, limits), StatusCode::kOutOfRange,
              "image[0]: image of 5 bytes exceeds the limit of 4 bytes");
  ExpectError(ParseInvokeMultipart(R"({"prompt":"x"})", {""}, limits), StatusCode::kInvalidArgument,
              "image[0]: empty image");
  ExpectError(ParseInvokeMultipart(R"({"prompt":)", {"a"}, limits), StatusCode::kInvalidArgument,
              "request: invalid JSON");
}

}  // namespace
}  // namespace vlmd::serve::api
