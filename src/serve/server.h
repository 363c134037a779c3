// The vlmd HTTP server: routes, authentication, limits and the mapping between HTTP and jobs.
// Endpoints: GET /health /ready /metrics /v1/models, POST /v1/vlm/invoke /v1/chat/completions
// (see README "HTTP API"). The server listens before the model is loaded (/ready is 503 until
// SetModel), so orchestrators can probe it during a long load.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "serve/api/requests.h"
#include "serve/model_host.h"
#include "serve/obs/metrics.h"
#include "serve/prepare_job.h"
#include "serve/server_metrics.h"

namespace httplib {
class Server;
}

namespace vlmd::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (tests)
  // Connections served at once. Each open connection holds a thread while it sends a request
  // (bounded by read_timeout_s) and while it idles between keep-alive requests (keep_alive_s).
  int http_threads = 64;
  std::string api_key;                 // non-empty: /v1/* need "Authorization: Bearer <key>"
  size_t max_body_bytes = 32u << 20;   // larger bodies get 413
  int read_timeout_s = 10;             // a client that stalls longer is dropped (slow loris)
  int write_timeout_s = 30;
  int keep_alive_s = 2;                // idle keep-alive connections close after this
  api::RequestLimits limits;
  PrepareOptions prepare;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // Stop()s

  ServerMetrics& metrics() { return *metrics_; }

  // Binds and starts serving on a background thread. UNAVAILABLE when the address cannot be bound.
  Status Start();
  int port() const { return port_; }
  // Makes `model` the served model (/ready turns 200). Thread-safe.
  void SetModel(std::shared_ptr<ModelHost> model);
  // Stops accepting, waits for the listener thread. Idempotent.
  void Stop();

 private:
  class Handlers;
  std::shared_ptr<ModelHost> model() const;

  ServerOptions options_;
  std::unique_ptr<obs::Registry> registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Handlers> handlers_;
  mutable std::mutex model_mu_;
  std::shared_ptr<ModelHost> model_;
  std::thread listener_;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace vlmd::serve
