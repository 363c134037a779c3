#include "serve/http/handler_pool.h"

#include <utility>

#include "core/thread_name.h"

namespace vlmd::serve {

HandlerPool::HandlerPool(int threads, size_t max_queued, std::string name) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name] {
      SetThreadName(name);
      Run();
    });
  }
}

bool HandlerPool::TryPost(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t HandlerPool::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void HandlerPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void HandlerPool::Run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace vlmd::serve
