// Sends finished spans to an OpenTelemetry collector: OTLP over HTTP with the JSON encoding
// (POST <endpoint>, usually http://collector:4318/v1/traces). Request threads hand spans over
// and never wait on the network: a background thread batches them (up to kMaxBatch spans, or
// what arrived within the flush interval) and posts each batch once; when the queue is full, or
// a post fails, those spans are dropped and counted (vlm_trace_spans_total{result}).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/http/json_post.h"
#include "serve/obs/metrics.h"
#include "serve/obs/trace.h"

namespace vlmd::serve {

struct SpanExporterOptions {
  std::string endpoint;  // http(s)://host[:port]/path
  std::string service_name = "vlmd";
  std::string service_version;
  size_t max_queue = 4096;  // spans waiting; more are dropped
  std::chrono::milliseconds flush_interval{500};
  int timeout_s = 5;  // connect and read timeout of one post
};

class SpanExporter {
 public:
  // INVALID_ARGUMENT when the endpoint is not an http(s) URL. `spans` counts per result
  // (exported | dropped); it must outlive the exporter.
  static Result<std::unique_ptr<SpanExporter>> Create(SpanExporterOptions options,
                                                      obs::CounterFamily* spans);
  // Posts one last batch of what is queued (one attempt, within kShutdownTimeoutS), drops and
  // counts the rest, then stops: a collector that is down or slow cannot hold up a shutdown
  // (a post still in flight, or the last one, is cut off after kShutdownTimeoutS).
  ~SpanExporter();

  // Queues the spans of one request (all or, when the queue is full, none). Thread-safe.
  void Export(std::vector<obs::Span> spans);

 private:
  static constexpr size_t kMaxBatch = 512;
  static constexpr int kShutdownTimeoutS = 2;
  SpanExporter(SpanExporterOptions options, obs::CounterFamily* spans, JsonEndpoint endpoint);
  void Run();
  bool Post(const std::vector<obs::Span>& batch, int timeout_s);

  SpanExporterOptions options_;
  obs::CounterFamily* counts_;
  CancellablePoster poster_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<obs::Span> queue_;
  bool stop_ = false;
  bool finished_ = false;  // Run returned (under mu_)
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace vlmd::serve
