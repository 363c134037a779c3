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

}  // namespace vlmd::serve
