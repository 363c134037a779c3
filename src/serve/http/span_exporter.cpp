// OTLP/HTTP JSON span export (see span_exporter.h).
#include "serve/http/span_exporter.h"

#include <algorithm>
#include <spdlog/spdlog.h>

namespace vlmd::serve {

Result<std::unique_ptr<SpanExporter>> SpanExporter::Create(SpanExporterOptions options,
                                                           obs::CounterFamily* spans) {
  auto endpoint = ParseJsonEndpoint(options.endpoint);
  if (!endpoint.ok()) {
    return InvalidArgumentError("OTLP endpoint '" + options.endpoint + "': " + endpoint.status().message());
  }
  // A bare collector address ("http://c:4318" or ".../") means OTLP's traces path.
  if (endpoint->path == "/") endpoint->path = "/v1/traces";
  return std::unique_ptr<SpanExporter>(new SpanExporter(std::move(options), spans, std::move(*endpoint)));
}

SpanExporter::SpanExporter(SpanExporterOptions options, obs::CounterFamily* spans,
                           JsonEndpoint endpoint)
    : options_(std::move(options)),
      counts_(spans),
      poster_(std::move(endpoint)),
      thread_([this] { Run(); }) {}

SpanExporter::~SpanExporter() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
  // A post in flight (up to 2 x its timeout) and the last one (kShutdownTimeoutS): past the
  // bound both are cut off.
  if (!cv_.wait_for(lock, std::chrono::seconds(kShutdownTimeoutS), [this] { return finished_; })) {
    lock.unlock();
    poster_.Cancel();
  } else {
    lock.unlock();
  }
  thread_.join();
}

void SpanExporter::Export(std::vector<obs::Span> spans) {
  if (spans.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_ && queue_.size() + spans.size() <= options_.max_queue) {
      for (obs::Span& s : spans) queue_.push_back(std::move(s));
      spans.clear();
    }
  }
  if (!spans.empty()) {
    counts_->With({"dropped"}).Inc(static_cast<double>(spans.size()));
    return;
  }
  cv_.notify_one();
}

void SpanExporter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  // Whatever way Run returns, the destructor's wait ends.
  struct Finished {
    SpanExporter* e;
    std::unique_lock<std::mutex>* lock;
    ~Finished() {
      if (!lock->owns_lock()) lock->lock();
      e->finished_ = true;
      e->cv_.notify_all();
    }
  } finished{this, &lock};
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (!stop_ && queue_.size() < kMaxBatch) {
      // Let a request's other spans and its neighbours' arrive: one post per interval.
      cv_.wait_for(lock, options_.flush_interval, [this] { return stop_ || queue_.size() >= kMaxBatch; });
    }
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    std::vector<obs::Span> batch;
    while (!queue_.empty() && batch.size() < kMaxBatch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    const bool last = stop_;
    if (last && !queue_.empty()) {  // stopping: one last post, the rest is dropped
      counts_->With({"dropped"}).Inc(static_cast<double>(queue_.size()));
      queue_.clear();
    }
    lock.unlock();
    const bool ok =
        Post(batch, last ? std::min(options_.timeout_s, kShutdownTimeoutS) : options_.timeout_s);
    counts_->With({ok ? "exported" : "dropped"}).Inc(static_cast<double>(batch.size()));
    lock.lock();
    if (last) return;
  }
}

bool SpanExporter::Post(const std::vector<obs::Span>& batch, int timeout_s) {
  const std::string error = poster_.Post(
      obs::OtlpJson(batch, options_.service_name, options_.service_version), timeout_s);
  if (!error.empty()) {
    // At most one line per failed post (once per flush interval), not one per span.
    spdlog::warn("trace export to {} failed ({}); {} spans dropped", poster_.endpoint().url(), error,
                 batch.size());
    return false;
  }
  return true;
}

}  // namespace vlmd::serve
