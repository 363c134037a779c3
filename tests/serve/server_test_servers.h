// Servers for the end-to-end tests of the guard rails and the server's lifecycle: a scratch
// folder, a started server with fixture models, a client, and request bodies.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "server_harness.h"

namespace vlmd::serve {

using nlohmann::json;
using testing::AddFixtureModel;
using testing::FixtureSpec;

// A scratch folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("vlmd-guard-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& content) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    return p;
  }
  std::string Path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A server with the given options and the fixture model(s), ready.
inline std::unique_ptr<Server> StartServer(ServerOptions o, const std::vector<ModelSpec>& models = {}) {
  o.host = "127.0.0.1";
  o.port = 0;
  auto server = std::make_unique<Server>(o);
  const Status s = server->Start();
  if (!s.ok()) throw std::runtime_error(s.ToString());
  if (models.empty()) {
    AddFixtureModel(*server, FixtureSpec("tiny-smolvlm"));
  } else {
    for (const ModelSpec& m : models) AddFixtureModel(*server, m);
  }
  server->SetReady(true);
  return server;
}

inline std::unique_ptr<httplib::Client> ClientOf(const Server& s) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", s.port());
  c->set_read_timeout(60, 0);
  return c;
}

inline RouteConfig SplitRoute(std::string name, std::vector<RouteTarget> split) {
  RouteConfig r;
  r.name = std::move(name);
  r.split = std::move(split);
  return r;
}

inline httplib::Headers Bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

inline json ChatRequest(const std::string& text, int max_tokens, bool stream = false) {
  return {{"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", max_tokens},
          {"stream", stream},
          {"logprobs", true}};
}

// A chat completion stream, parsed: its content deltas, finish reason, last chunk and [DONE].
struct Sse {
  std::vector<std::string> texts;  // content deltas, in order
  std::string finish_reason;
  json last;                       // the chunk with finish_reason
  bool done = false;
};

inline Sse ParseSse(const std::string& body) {
  Sse out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string payload = body.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") {
      out.done = true;
      continue;
    }
    const json chunk = json::parse(payload, nullptr, false);
    if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
    const json& d = chunk["choices"][0]["delta"];
    if (d.contains("content") && !d["content"].get<std::string>().empty()) {
      out.texts.push_back(d["content"]);
    }
    if (!chunk["choices"][0]["finish_reason"].is_null()) {
      out.finish_reason = chunk["choices"][0]["finish_reason"];
      out.last = chunk;
    }
  }
  return out;
}

inline std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += p;
  return s;
}

}  // namespace vlmd::serve
