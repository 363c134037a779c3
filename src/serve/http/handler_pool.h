// HandlerPool: the HTTP front's handler threads and the bounded queue of work waiting for them
// (http_front.cpp keeps one for requests and one for probes).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vlmd::serve {

class HandlerPool {
 public:
  // Its threads are named `name` (core/thread_name.h).
  HandlerPool(int threads, size_t max_queued, std::string name);
  ~HandlerPool() { Stop(); }
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // False (and `task` dropped) when the queue is full or the pool stopped.
  bool TryPost(std::function<void()> task);
  // Tasks waiting for a thread now.
  size_t queued();
  // No new tasks; the queued ones run too, then the threads end (a request accepted into the
  // queue gets an answer: a stopping server answers it as shutting down, where dropping it
  // closed its connection with nothing). Idempotent.
  void Stop();

 private:
  void Run();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopped_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace vlmd::serve
