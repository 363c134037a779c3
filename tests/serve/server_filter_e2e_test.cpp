// The output word filter end to end over real HTTP on 127.0.0.1 (issue 6): masking and blocking,
// a word split across tokens under streaming, a word begun in the client's own text, and the
// logprobs that would spell one. The other guard rails: server_guard_e2e_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "serve/policy/word_filter.h"
#include "server_harness.h"
#include "server_test_servers.h"

namespace vlmd::serve {
namespace {

bool IsPlainAscii(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return !s.empty();
}

// The unfiltered answer to `req`, and a word made of the end of one generated token and the
// start of the next (so that it is split across tokens, hence across stream events).
struct SplitWord {
  std::string text;
  std::string word;
};
SplitWord FindSplitWord(httplib::Client& c, const json& req) {
  auto r = c.Post("/v1/chat/completions", req.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  const json j = json::parse(r->body);
  SplitWord out;
  out.text = j["choices"][0]["message"]["content"];
  const json& lp = j["choices"][0]["logprobs"]["content"];
  for (size_t i = 0; i + 1 < lp.size(); ++i) {
    const std::string a = lp[i]["token"], b = lp[i + 1]["token"];
    if (!IsPlainAscii(a) || !IsPlainAscii(b)) continue;
    out.word = a.substr(a.size() - std::min<size_t>(a.size(), 3)) + b.substr(0, std::min<size_t>(b.size(), 3));
    if (out.word.size() >= 2) return out;
  }
  out.word.clear();
  return out;
}

TEST(ServerGuard, WordSplitAcrossTokensIsMaskedInStreamAndReply) {
  const json req = ChatRequest("Tell me a long story about the sea.", 24);
  SplitWord sw;
  {
    auto plain = StartServer({});
    sw = FindSplitWord(*ClientOf(*plain), req);
  }
  ASSERT_FALSE(sw.word.empty()) << "no two adjacent printable ASCII tokens in: " << sw.text;
  ASSERT_NE(sw.text.find(sw.word), std::string::npos);
  ServerOptions o;
  o.guard.filter_words = {sw.word};
  o.guard.filter_action = policy::FilterAction::kMask;
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  auto filter = policy::WordFilter::Compile(o.guard.filter_words);
  ASSERT_TRUE(filter.ok());
  const std::string expected = policy::FilterText(*filter, policy::FilterAction::kMask, sw.text).text;
  ASSERT_NE(expected, sw.text);
  ASSERT_NE(expected.find("***"), std::string::npos);

  // Non-streaming: masked, and the token logprobs (which would spell the word) are withheld.
  const json full = json::parse(c->Post("/v1/chat/completions", req.dump(), "application/json")->body);
  EXPECT_EQ(full["choices"][0]["message"]["content"], expected);
  EXPECT_TRUE(full["choices"][0]["logprobs"].is_null());

  // Streaming: no event carries the word or any part of it that a client could join.
  json sreq = req;
  sreq["stream"] = true;
  auto r = c->Post("/v1/chat/completions", sreq.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const Sse sse = ParseSse(r->body);
  EXPECT_TRUE(sse.done);
  EXPECT_EQ(Join(sse.texts), expected);
  EXPECT_EQ(Join(sse.texts).find(sw.word), std::string::npos);
  EXPECT_EQ(sse.finish_reason, "length");

  const std::string metrics = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(metrics, R"(vlm_policy_decisions_total{policy="word_filter",decision="mask"})"), 2);
}

// A client that asks the model to continue its own text (a trailing assistant message) cannot
// get a word through by writing its first letters: the word begun in the prefill and finished by
// the reply is masked (the filter saw only the reply's bytes and passed it). The word here is
// the prefill's last two letters and the reply's first two bytes.
TEST(ServerGuard, AWordBegunInTheAssistantPrefillIsMasked) {
  json req = ChatRequest("Tell me a long story about the sea.", 8);
  req["messages"].push_back({{"role", "assistant"}, {"content", "Once upon a time, zq"}});
  std::string reply;
  {
    auto plain = StartServer({});
    const json r = json::parse(ClientOf(*plain)->Post("/v1/chat/completions", req.dump(), "application/json")->body);
    reply = r["choices"][0]["message"]["content"].get<std::string>();
  }
  ASSERT_GE(reply.size(), 2u);
  // Printable ASCII, the second not a space (a word's ends are trimmed).
  ASSERT_TRUE(reply[0] >= ' ' && reply[0] <= '~' && reply[1] > ' ' && reply[1] <= '~')
      << "the reply does not start with two printable characters: " << reply;
  ServerOptions o;
  o.guard.filter_words = {"zq" + reply.substr(0, 2)};
  o.guard.filter_action = policy::FilterAction::kMask;
  auto server = StartServer(o);
  const json r = json::parse(ClientOf(*server)->Post("/v1/chat/completions", req.dump(), "application/json")->body);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "***" + reply.substr(2)) << r.dump();
}

// An alternative in top_logprobs is read after the text before it: one that completes a word
// with the chosen tokens' last bytes shows the word, so the logprobs are withheld (each
// alternative was checked on its own). The word here is the last byte of the chosen token i - 1
// and the first two of an alternative at i, found in a reply without a filter; nowhere else.
TEST(ServerGuard, AlternativesThatFinishAWordWithTheTextWithholdTheLogprobs) {
  json req = ChatRequest("Tell me a long story about the sea.", 12);
  req["top_logprobs"] = 5;
  json plain_reply;
  {
    auto plain = StartServer({});
    plain_reply = json::parse(ClientOf(*plain)->Post("/v1/chat/completions", req.dump(), "application/json")->body);
  }
  const json& content = plain_reply["choices"][0]["logprobs"]["content"];
  ASSERT_TRUE(content.is_array()) << plain_reply.dump();
  auto fold = [](std::string t) {
    for (char& ch : t) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return t;
  };
  const std::string text = fold(plain_reply["choices"][0]["message"]["content"].get<std::string>());
  std::string alone;  // every alternative on its own line, as the filter saw them before
  for (const json& t : content) {
    for (const json& a : t["top_logprobs"]) alone.append("\n").append(fold(a["token"].get<std::string>()));
  }
  auto printable = [](char ch) { return ch > ' ' && ch <= '~'; };
  std::string word;
  for (size_t i = 1; i < content.size() && word.empty(); ++i) {
    const std::string prev = content[i - 1]["token"];
    if (prev.empty() || !printable(prev.back())) continue;
    for (const json& a : content[i]["top_logprobs"]) {
      const std::string alt = a["token"];
      if (alt.size() < 2 || !printable(alt[0]) || !printable(alt[1])) continue;
      const std::string w = fold(prev.substr(prev.size() - 1) + alt.substr(0, 2));
      if (text.find(w) == std::string::npos && alone.find(w) == std::string::npos) {
        word = w;
        break;
      }
    }
  }
  ASSERT_FALSE(word.empty()) << "no alternative of two printable bytes after a printable one: " << content.dump();
  ServerOptions o;
  o.guard.filter_words = {word};
  o.guard.filter_action = policy::FilterAction::kMask;
  auto server = StartServer(o);
  const json r = json::parse(ClientOf(*server)->Post("/v1/chat/completions", req.dump(), "application/json")->body);
  EXPECT_EQ(r["choices"][0]["message"]["content"], plain_reply["choices"][0]["message"]["content"]) << word;
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null()) << "'" << word << "' readable in: " << r.dump();

  // A word in the prompt's own end is the client's: it does not withhold the reply's logprobs.
  ServerOptions own;
  own.guard.filter_words = {"zqzq"};
  auto quiet = StartServer(own);
  json prefilled = req;
  prefilled["messages"].push_back({{"role", "assistant"}, {"content", "Once upon a zqzq"}});
  const json q = json::parse(ClientOf(*quiet)->Post("/v1/chat/completions", prefilled.dump(), "application/json")->body);
  ASSERT_TRUE(q.contains("choices")) << q.dump();
  EXPECT_TRUE(q["choices"][0]["logprobs"].is_object()) << q.dump();
}

TEST(ServerGuard, BlockModeStopsTheReplyWithContentFilter) {
  const json req = ChatRequest("Tell me a long story about the sea.", 24);
  SplitWord sw;
  {
    auto plain = StartServer({});
    sw = FindSplitWord(*ClientOf(*plain), req);
  }
  ASSERT_FALSE(sw.word.empty());
  ServerOptions o;
  o.guard.filter_words = {sw.word};
  o.guard.filter_action = policy::FilterAction::kBlock;
  auto server = StartServer(o);
  auto c = ClientOf(*server);
  const std::string prefix = sw.text.substr(0, sw.text.find(sw.word));
  const json full = json::parse(c->Post("/v1/chat/completions", req.dump(), "application/json")->body);
  EXPECT_EQ(full["choices"][0]["finish_reason"], "content_filter");
  EXPECT_EQ(full["choices"][0]["message"]["content"], prefix);

  json sreq = req;
  sreq["stream"] = true;
  const Sse sse = ParseSse(c->Post("/v1/chat/completions", sreq.dump(), "application/json")->body);
  EXPECT_TRUE(sse.done);
  EXPECT_EQ(sse.finish_reason, "content_filter");
  EXPECT_EQ(Join(sse.texts), prefix);

  // With the word as a stop string, logprobs list only the tokens the text holds (a token that
  // holds text and the word's first bytes among them): they must not spell the word either.
  json stopped = req;
  stopped["stop"] = json::array({sw.word});
  const json st = json::parse(c->Post("/v1/chat/completions", stopped.dump(), "application/json")->body);
  EXPECT_EQ(st["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(st["choices"][0]["message"]["content"], prefix);
  const json& lp = st["choices"][0]["logprobs"];
  if (!lp.is_null()) {
    std::string spelled;
    for (const json& t : lp["content"]) spelled += t["token"].get<std::string>();
    EXPECT_EQ(spelled.find(sw.word), std::string::npos) << st.dump();
    EXPECT_EQ(spelled.rfind(prefix, 0), 0u) << st.dump();
  }
}

TEST(ServerGuard, BlockModeOnInvokeStreamEndsWithContentFilter) {
  const json ireq{{"prompt", "Tell me a long story about the sea."}, {"max_tokens", 24}, {"stream", true}};
  std::string unfiltered;
  {
    auto plain = StartServer({});
    auto r = ClientOf(*plain)->Post("/v1/vlm/invoke", ireq.dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200);
    const size_t last = r->body.rfind("data: {");
    unfiltered = json::parse(r->body.substr(last + 6, r->body.find("\n\n", last) - last - 6))["text"];
  }
  ASSERT_GE(unfiltered.size(), 8u);
  // A word from the middle of the answer (printable, no spaces at its ends).
  std::string word;
  for (size_t at = unfiltered.size() / 2; at + 4 <= unfiltered.size() && word.empty(); ++at) {
    const std::string w = unfiltered.substr(at, 4);
    if (IsPlainAscii(w)) word = w;
  }
  ASSERT_FALSE(word.empty()) << unfiltered;
  ServerOptions o;
  o.guard.filter_words = {word};
  o.guard.filter_action = policy::FilterAction::kBlock;
  auto server = StartServer(o);
  auto r = ClientOf(*server)->Post("/v1/vlm/invoke", ireq.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->body.find(word), std::string::npos);
  const size_t last = r->body.rfind("data: {");
  const json final_event = json::parse(r->body.substr(last + 6, r->body.find("\n\n", last) - last - 6));
  EXPECT_EQ(final_event["finish_reason"], "content_filter");
  EXPECT_EQ(final_event["text"], unfiltered.substr(0, unfiltered.find(word)));
}

}  // namespace
}  // namespace vlmd::serve
