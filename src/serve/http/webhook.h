// Sends events (JSON bodies) to a webhook from a background thread: callers never wait on the
// network. Each event is posted until a 2xx answer, at most 1 + retries times, with a doubling
// pause between tries; a full queue drops new events. Every outcome is counted in `results`
// {result = sent | failed | dropped}. Used by the drift alarms (drift_monitor.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "serve/http/json_post.h"
#include "serve/obs/metrics.h"

namespace vlmd::serve {

struct WebhookOptions {
  std::string url;  // http(s)://host[:port]/path
  int timeout_s = 5;
  int retries = 3;
  size_t max_queue = 256;
  std::chrono::milliseconds first_pause{1000};  // before the first retry; doubles after each
};

class WebhookSender {
 public:
  // INVALID_ARGUMENT when the URL is not http(s). `results` must outlive the sender.
  static Result<std::unique_ptr<WebhookSender>> Create(WebhookOptions options, obs::CounterFamily* results);
  // Stops at once: a post in flight is cut short (its event counted failed), queued events are
  // dropped (counted): a dead or slow receiver cannot hold up a shutdown.
  ~WebhookSender();

  // Queues one event. Thread-safe; never blocks on the network.
  void Send(std::string body);

 private:
  WebhookSender(WebhookOptions options, obs::CounterFamily* results, JsonEndpoint endpoint);
  void Run();

  WebhookOptions options_;
  obs::CounterFamily* results_;
  CancellablePoster poster_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace vlmd::serve
