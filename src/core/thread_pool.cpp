// ThreadPool. Completion is counted in finished tasks, not in workers checking in: the owner
// claims tasks itself, so when the workers are slow to wake (an oversubscribed host) it simply
// runs the job alone and never waits on a thread that has not been scheduled yet.
//
// Protocol: the owner writes job g's fn, ctx and n_tasks into job_, then publishes claim =
// (g << 32) | 0 and bumps generation (the futex), all in one cache line. Anyone claims task i by
// CAS (g, i) -> (g, i + 1) and may only run it if the CAS succeeded, which proves job g is still
// current: the owner rewrites fn/ctx/n_tasks only for job g + 1, after every task of g finished,
// and publishes g + 1's claim word after them, so a worker that read g + 1's fields while
// expecting g fails its CAS. Each thread adds the number of tasks it ran to done_ when it finds
// none left; the owner returns when done_ == n_tasks.
#include "core/thread_pool.h"

#include "core/check.h"

namespace vlmd {
namespace {
// ~20-50 us of spinning: long enough to bridge the gap between consecutive kernels of one
// forward pass, short enough not to burn a core while the server is idle.
constexpr int kSpinIterations = 20000;

inline void CpuRelax() { __builtin_ia32_pause(); }
inline uint32_t GenOf(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
inline uint32_t IndexOf(uint64_t word) { return static_cast<uint32_t>(word); }
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  job_.generation.fetch_add(1, std::memory_order_acq_rel);
  job_.generation.notify_all();
  for (auto& w : workers_) w.join();
}

int64_t ThreadPool::RunTasks(uint32_t gen, int thread) {
  int64_t ran = 0;
  uint64_t word = job_.claim.load(std::memory_order_acquire);
  for (;;) {
    if (GenOf(word) != gen) return ran;
    // Read the job before claiming; a successful CAS below proves what we read was job `gen`.
    const TaskFn fn = job_.fn.load(std::memory_order_relaxed);
    void* ctx = job_.ctx.load(std::memory_order_relaxed);
    const int64_t n_tasks = job_.n_tasks.load(std::memory_order_relaxed);
    if (static_cast<int64_t>(IndexOf(word)) >= n_tasks) return ran;
    if (!job_.claim.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      continue;  // word was reloaded
    }
    fn(ctx, IndexOf(word), thread);
    ++ran;
    word = job_.claim.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = job_.generation.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < kSpinIterations; ++i) {
      CpuRelax();
      gen = job_.generation.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      job_.generation.wait(seen, std::memory_order_acquire);
      gen = job_.generation.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    const int64_t ran = RunTasks(gen, thread);
    // Tasks we ran belong to job `gen`, which cannot complete (nor be replaced) before this
    // count arrives, so done_ still counts that job.
    if (ran > 0) {
      const int64_t n_tasks = job_.n_tasks.load(std::memory_order_relaxed);
      if (done_.fetch_add(ran, std::memory_order_acq_rel) + ran == n_tasks) done_.notify_one();
    }
  }
}

void ThreadPool::Run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  VLMD_CHECK_MSG(n_tasks < (int64_t{1} << 31), "ParallelFor task count must fit 31 bits");
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  const uint32_t gen = job_.generation.load(std::memory_order_relaxed) + 1;
  done_.store(0, std::memory_order_relaxed);
  job_.fn.store(fn, std::memory_order_relaxed);
  job_.ctx.store(ctx, std::memory_order_relaxed);
  job_.n_tasks.store(n_tasks, std::memory_order_relaxed);
  job_.claim.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  job_.generation.store(gen, std::memory_order_release);
  job_.generation.notify_all();
  const int64_t ran = RunTasks(gen, 0);
  int64_t done = done_.fetch_add(ran, std::memory_order_acq_rel) + ran;
  for (int i = 0; done != n_tasks && i < kSpinIterations; ++i) {
    CpuRelax();
    done = done_.load(std::memory_order_acquire);
  }
  while (done != n_tasks) {
    done_.wait(done, std::memory_order_acquire);
    done = done_.load(std::memory_order_acquire);
  }
}

}  // namespace vlmd
