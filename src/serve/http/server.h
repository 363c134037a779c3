// The vlmd HTTP server: routes, authentication, limits and the mapping between HTTP and jobs.
// Endpoints: GET /health /ready /metrics /v1/models, POST /v1/vlm/invoke /v1/chat/completions,
// and with an admin key /admin/... (see README "HTTP API" and "Guard rails"). The server
// listens before the models are loaded (/ready is 503 until SetReady), so orchestrators can
// probe it during a long load.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/api/requests.h"
#include "serve/config/router.h"
#include "serve/config/server_options.h"
#include "serve/hosting/model_host.h"
#include "serve/hosting/prepare_job.h"
#include "serve/hosting/stream_window.h"
#include "serve/http/concurrency_limit.h"
#include "serve/http/drift_monitor.h"
#include "serve/http/span_exporter.h"
#include "serve/obs/metrics.h"
#include "serve/obs/server_metrics.h"

namespace vlmd::serve {

class Guard;
class HttpFront;

// 8 random hex digits (std::random_device): the request-id prefix of one server start.
std::string RandomInstanceId();

// Logs what a freshly loaded model did with its weights: how its matrices were packed (fast
// precision: how many float matrices took column scales), and, for a sealed model, that it was
// decrypted into memory (a warning when that memory could not be locked).
void LogLoadedWeights(const ModelHost& model);

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // Stop()s

  ServerMetrics& metrics() { return *metrics_; }
  Router& router() { return router_; }
  // router().SetRoutes, after loading the redaction detectors of routes with their own setting
  // (UNAVAILABLE, routes unchanged, when they cannot load). router().SetRoutes alone (tests)
  // leaves that load to a route's first request.
  Status SetRoutes(std::vector<RouteConfig> routes, std::string default_name);

  // Loads the guard rails (keys, allowlist, word filter, audit log: their errors), binds and
  // starts serving on a background thread. UNAVAILABLE when the address cannot be bound.
  Status Start();
  int port() const { return port_; }
  // Requests waiting for a handler thread and heads for their check (vlm_http_queued_requests).
  size_t queued_requests() const;
  // Adds (or replaces) a served model; /ready stays as it was. RESOURCE_EXHAUSTED (and the model
  // is not added) when its memory plan does not fit the memory budget beside the loaded models.
  Status AddModel(std::shared_ptr<ModelHost> model);
  // Loads `spec` within what the memory budget leaves (MemoryLeftForLoad) and adds it, one load,
  // add or reload at a time: two loads at once (a configured model while an admin reloads
  // another) could each take all that is left.
  Result<std::shared_ptr<ModelHost>> LoadModel(const ModelSpec& spec);
  // What the memory budget leaves for the packed weights of a model of `spec` loaded now, beside
  // the loaded models, the stream windows and its own image cache (UINT64_MAX without a budget):
  // ModelHost::Load's cap, so that a model too large stops loading before it takes the memory.
  // AddModel's check of the whole plan stays the one that decides.
  uint64_t MemoryLeftForLoad(const ModelSpec& spec);
  // /ready answers 200 once every configured model is loaded (the caller says when).
  void SetReady(bool ready) { ready_.store(ready); }
  // Hot swap (SPEC P7): loads the model's current spec, patched (default: the same files
  // re-read; a hash-derived version is derived again, a configured label kept) beside the
  // serving version (within the memory budget, beside it), runs a self-check on it (one token from text, and from an image when the
  // serving version has vision: the new one must keep it), and only then switches new requests
  // to it; in-flight requests finish on the old one. On any failure the old version keeps
  // serving and the error is returned. One reload at a time. Thread-safe. `previous_version`,
  // when given, receives the version that was replaced. UNAVAILABLE once the server drains or
  // stops (before loading, or after: the new copy is dropped).
  // `patch` (the admin API's) changes only the keys it gives, applied to the serving version's
  // spec under the reload lock: two reloads at once each see the other's result (the second
  // had undone the first, built from the version the first replaced).
  struct ModelPatch {
    std::optional<std::string> text_path, mmproj_path, version;
  };
  // `loaded`, when given, receives the version this reload put in (a second reload may replace
  // it before the caller looks at the router).
  Status ReloadModel(const std::string& name, const ModelPatch* patch = nullptr,
                     std::string* previous_version = nullptr, std::shared_ptr<ModelHost>* loaded = nullptr);
  // Waits until every version a reload replaced has been let go by its last request (each counts
  // against the memory budget until then), at most `limit`: true when none is left, false when
  // some still are, or the server drains. A SIGHUP reload of several models waits between two,
  // or each next budget check counted the version just replaced. Thread-safe.
  bool WaitForReplacedVersions(std::chrono::milliseconds limit);
  // Graceful shutdown, first half: /ready turns 503 and new generation requests get 503
  // "shutting_down", while requests already accepted (queued, running, streaming) finish. Returns
  // true when none is left, false when `timeout` passed first. Thread-safe.
  bool Drain(std::chrono::milliseconds timeout);
  int in_flight() const { return in_flight_.load(); }
  bool draining() const { return draining_.load(); }
  // "req-<instance>-N": the id of each request (X-Request-Id, replies, audit lines), unique
  // across restarts and replicas by the random instance prefix of this server. Thread-safe.
  std::string NextRequestId() {
    return "req-" + instance_id_ + "-" + std::to_string(next_request_id_.fetch_add(1) + 1);
  }
  // Stops accepting, lets the requests being handled finish, closes the connections. Idempotent.
  void Stop();

 private:
  class Handlers;

  // OK when `candidate`'s memory plan fits the budget beside every loaded model's (also one of
  // the same name: a reload holds both versions) and every replaced version still finishing its
  // requests.
  Status CheckMemoryBudget(const ModelHost& candidate);
  // AddModel under reload_mu_.
  Status AddModelLocked(std::shared_ptr<ModelHost> model);
  // The plans of the served models and of replaced versions still alive (prunes the gone), plus
  // the stream windows' limit.
  uint64_t HeldMemory();
  // vlm_memory_planned_bytes: the sum of the served models' plans.
  void UpdateMemoryPlanGauge();
  // The redactor for `options`, built once per distinct setting (the config parser only checks
  // that its files exist); nullptr when they do not load.
  std::shared_ptr<const redact::Redactor> RedactorFor(const redact::RedactOptions& options);

  ServerOptions options_;
  std::unique_ptr<obs::Registry> registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<Guard> guard_;
  std::unique_ptr<SpanExporter> exporter_;  // nullptr: no OTLP endpoint
  std::unique_ptr<DriftMonitor> drift_;     // nullptr: drift alarms off (created by Start)
  std::unique_ptr<StreamWindows> streams_;  // stream_id windows (SPEC S6)
  Router router_;
  std::unique_ptr<Handlers> handlers_;
  std::unique_ptr<HttpFront> front_;  // after handlers_: stopped (and destroyed) before them
  std::mutex redactors_mu_;
  std::map<std::string, std::shared_ptr<const redact::Redactor>> redactors_;  // by setting
  ConcurrencyLimit redaction_slots_;  // requests redacting at once (max_concurrent_redactions)
  std::mutex reload_mu_;  // reloads and adds, one at a time (each checks the memory budget)
  // Versions a reload replaced, counted in the memory budget until torn down. Only this list and
  // copies made under replaced_mu_ hold them besides their requests, so the reaper thread sees
  // when the last request has let go (use_count 1) and tears the version down itself: a
  // request's thread dropping the last reference did it (joining its scheduler, unmapping, a
  // sealed model's wipe) before that request's reply left. Started at the first reload.
  void ReapReplaced();
  std::mutex replaced_mu_;
  std::condition_variable replaced_cv_;
  std::vector<std::shared_ptr<ModelHost>> replaced_;
  uint64_t reaping_bytes_ = 0;  // plans of versions being torn down (out of replaced_)
  size_t reaping_ = 0;          // how many
  bool reaper_stop_ = false;
  std::thread reaper_;
  int port_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  const std::string instance_id_ = RandomInstanceId();  // 8 hex digits, new at every start
  std::atomic<uint64_t> next_request_id_{0};   // generation requests accepted and not yet answered
  std::atomic<bool> stopped_{false};
};

}  // namespace vlmd::serve
