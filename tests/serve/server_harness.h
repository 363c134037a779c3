// Test harness for the server end to end: an in-process vlmd::serve::Server on 127.0.0.1 (any
// free port) serving a fixture model, and small helpers over cpp-httplib's client.
#pragma once

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/http/server.h"
#include "test_util.h"

namespace vlmd::serve::testing {

struct HarnessOptions {
  std::string fixture = "tiny-smolvlm";  // folder under tests/fixtures
  bool load_model = true;
  ServerOptions server;
  SchedulerOptions scheduler;
  int32_t n_ctx = 512;
};

// The spec of a fixture model served under `name` (version "" : the files' hash prefix).
inline ModelSpec FixtureSpec(const std::string& name, const std::string& version = "",
                             const std::string& fixture = "tiny-smolvlm", int32_t n_ctx = 512,
                             SchedulerOptions scheduler = {}) {
  ModelSpec spec;
  spec.name = name;
  spec.version = version;
  spec.text_path = vlmd::testing::FixturePath(fixture + "/text.gguf");
  spec.mmproj_path = vlmd::testing::FixturePath(fixture + "/mmproj.gguf");
  spec.engine.threads = 2;
  spec.engine.n_ctx = n_ctx;
  spec.scheduler = scheduler;
  return spec;
}

// Loads `spec` and adds it to the server (throws on failure: a broken fixture ends the test).
inline void AddFixtureModel(Server& server, const ModelSpec& spec) {
  auto host = ModelHost::Load(spec, &server.metrics());
  if (!host.ok()) throw std::runtime_error(host.status().ToString());
  const Status added = server.AddModel(std::shared_ptr<ModelHost>(std::move(*host)));
  if (!added.ok()) throw std::runtime_error(added.ToString());
}

class Harness {
 public:
  explicit Harness(HarnessOptions o = {}) {
    o.server.port = 0;
    o.server.host = "127.0.0.1";
    server_ = std::make_unique<Server>(o.server);
    const Status s = server_->Start();
    if (!s.ok()) throw std::runtime_error(s.ToString());
    if (!o.load_model) return;
    AddFixtureModel(*server_, FixtureSpec(o.fixture, "", o.fixture, o.n_ctx, o.scheduler));
    server_->SetReady(true);
  }

  Server& server() { return *server_; }
  int port() const { return server_->port(); }
  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(60, 0);
    return c;
  }

 private:
  std::unique_ptr<Server> server_;
};

inline std::string ReadText(const std::string& path) {
  const std::vector<uint8_t> b = vlmd::testing::ReadFileBytes(path);
  return std::string(b.begin(), b.end());
}

// A 64 x 48 binary PPM: white left of column `split`, dark blue right of it (camera frames whose
// motion the split sets).
inline std::string SplitFrame(int split) {
  std::string ppm = "P6\n64 48\n255\n";
  for (int y = 0; y < 48; ++y) {
    for (int x = 0; x < 64; ++x) {
      const bool white = x < split;
      ppm += static_cast<char>(white ? 255 : 10);
      ppm += static_cast<char>(white ? 255 : 20);
      ppm += static_cast<char>(white ? 255 : 90);
    }
  }
  return ppm;
}

inline std::string FixtureImage(const std::string& name, const std::string& fixture = "tiny-smolvlm") {
  return ReadText(vlmd::testing::FixturePath(fixture + "/images/" + name));
}

// The value of a metric sample line "name{labels} value" (labels given verbatim, "" for none);
// -1 when absent.
inline double MetricValue(const std::string& text, const std::string& series) {
  const std::string key = series + " ";
  size_t at = 0;
  while ((at = text.find(key, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + key.size()));
    at += key.size();
  }
  return -1;
}

}  // namespace vlmd::serve::testing
