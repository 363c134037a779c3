// ThreadPool: generation counter + atomic task counter; spin-then-futex waiting.
#include "core/thread_pool.h"

#include "core/check.h"

namespace vlmd {
namespace {
// ~20-50 us of spinning: long enough to bridge the gap between consecutive kernels of one
// forward pass, short enough not to burn a core while the server is idle.
constexpr int kSpinIterations = 20000;

inline void CpuRelax() { __builtin_ia32_pause(); }
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunTasks(int thread) {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= job_n_tasks_) return;
    job_fn_(job_ctx_, task, thread);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      CpuRelax();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    RunTasks(thread);
    if (pending_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      pending_workers_.notify_one();
    }
  }
}

void ThreadPool::Run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  VLMD_CHECK_MSG(pending_workers_.load(std::memory_order_acquire) == 0,
                 "ThreadPool::ParallelFor is not reentrant");
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  pending_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  RunTasks(0);
  int pending = pending_workers_.load(std::memory_order_acquire);
  for (int i = 0; pending != 0 && i < kSpinIterations; ++i) {
    CpuRelax();
    pending = pending_workers_.load(std::memory_order_acquire);
  }
  while (pending != 0) {
    pending_workers_.wait(pending, std::memory_order_acquire);
    pending = pending_workers_.load(std::memory_order_acquire);
  }
}

}  // namespace vlmd
