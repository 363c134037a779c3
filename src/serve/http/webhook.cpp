// Webhook delivery with a bounded queue and retries (see webhook.h).
#include "serve/http/webhook.h"

#include <spdlog/spdlog.h>

namespace vlmd::serve {

Result<std::unique_ptr<WebhookSender>> WebhookSender::Create(WebhookOptions options,
                                                             obs::CounterFamily* results) {
  auto endpoint = ParseJsonEndpoint(options.url);
  if (!endpoint.ok()) {
    return InvalidArgumentError("webhook '" + options.url + "': " + endpoint.status().message());
  }
  // Every outcome's series exists from the start, so that increase() sees its first event.
  for (const char* result : {"sent", "failed", "dropped"}) results->With({result});
  return std::unique_ptr<WebhookSender>(new WebhookSender(std::move(options), results, std::move(*endpoint)));
}

WebhookSender::WebhookSender(WebhookOptions options, obs::CounterFamily* results, JsonEndpoint endpoint)
    : options_(std::move(options)),
      results_(results),
      poster_(std::move(endpoint)),
      thread_([this] { Run(); }) {}

WebhookSender::~WebhookSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  poster_.Cancel();
  cv_.notify_all();
  thread_.join();
}

void WebhookSender::Send(std::string body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_ && queue_.size() < options_.max_queue) {
      queue_.push_back(std::move(body));
      cv_.notify_one();
      return;
    }
  }
  results_->With({"dropped"}).Inc();
}

void WebhookSender::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) {
      results_->With({"dropped"}).Inc(static_cast<double>(queue_.size()));
      queue_.clear();
      return;
    }
    const std::string body = std::move(queue_.front());
    queue_.pop_front();
    std::string error;
    auto pause = options_.first_pause;
    for (int attempt = 0; attempt <= options_.retries && !stop_; ++attempt) {
      if (attempt > 0) {
        // Interruptible by the destructor: a dead receiver cannot hold up a shutdown.
        if (cv_.wait_for(lock, pause, [this] { return stop_; })) break;
        pause *= 2;
      }
      lock.unlock();
      error = poster_.Post(body, options_.timeout_s);
      lock.lock();
      if (error.empty()) break;
    }
    results_->With({error.empty() ? "sent" : "failed"}).Inc();
    // The base only: a webhook path often carries a token.
    if (!error.empty()) spdlog::warn("webhook at {} failed ({}); the event is lost", poster_.endpoint().base, error);
  }
}

}  // namespace vlmd::serve
