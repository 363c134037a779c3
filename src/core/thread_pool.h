// A fixed-size pool for data-parallel kernels: ParallelFor splits [0, n_tasks) over the workers
// and the calling thread. Built for many short parallel regions (a decode step runs hundreds):
// workers spin briefly before sleeping on a futex, and a job costs no allocation.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace vlmd {

class ThreadPool {
 public:
  // `n_threads` counts the caller: n_threads - 1 worker threads are started (n_threads >= 1).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task, thread) once for each task in [0, n_tasks), thread in [0, size()); returns when
  // all calls returned. Tasks are handed out dynamically. Not reentrant: only one thread (the
  // owner) may call ParallelFor at a time, and fn must not call it again.
  template <typename Fn>
  void ParallelFor(int64_t n_tasks, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    Run(n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<F*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  void Run(int64_t n_tasks, TaskFn fn, void* ctx);
  void WorkerLoop(int thread);
  void RunTasks(int thread);

  const int n_threads_;
  std::vector<std::thread> workers_;
  // The current job (written by the owner before bumping generation_).
  TaskFn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_n_tasks_ = 0;
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_workers_{0};
  std::atomic<bool> stop_{false};
};

// Splits [0, n) into `parts` contiguous ranges of near-equal size aligned to `align`; returns
// range `i` as [begin, end). Used to give each thread one slice of rows.
inline void SplitRange(int64_t n, int64_t parts, int64_t i, int64_t align, int64_t* begin,
                       int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t b = units * i / parts, e = units * (i + 1) / parts;
  *begin = b * align < n ? b * align : n;
  *end = e * align < n ? e * align : n;
}

}  // namespace vlmd
