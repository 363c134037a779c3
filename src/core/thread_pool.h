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
  // A published job. Two slots alternate by generation so that a worker which woke late can
  // read the previous slot without racing the owner writing the next one (see thread_pool.cpp).
  struct JobSlot {
    std::atomic<TaskFn> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    std::atomic<int64_t> n_tasks{0};
  };
  void Run(int64_t n_tasks, TaskFn fn, void* ctx);
  void WorkerLoop(int thread);
  // Claims and runs tasks of job `gen` until none is left; returns when the claim word has moved
  // on or every task is claimed.
  void RunTasks(uint32_t gen, int thread);

  const int n_threads_;
  std::vector<std::thread> workers_;
  JobSlot slots_[2];
  // Claim word: (generation << 32) | next task index. A task is claimed by a CAS that also checks
  // the generation, so a worker can never run a task of a job other than the one it read.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<int64_t> done_{0};        // tasks of the current job finished
  alignas(64) std::atomic<uint32_t> generation_{0};  // futex the sleeping workers wait on
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
