// ThreadPool. Completion is counted in finished tasks, not in workers checking in: the owner
// claims tasks itself, so when the workers are slow to wake (an oversubscribed host) it simply
// runs the job alone and never waits on a thread that has not been scheduled yet.
//
// Protocol: the owner writes job g into slots_[g & 1], then publishes claim_ = (g << 32) | 0 and
// bumps generation_ (the futex). Anyone claims task i by CAS (g, i) -> (g, i + 1) and may only
// run it if the CAS succeeded, which proves job g is still current (its tasks are not all done,
// so the owner has not started writing slot (g + 2) & 1). done_ counts finished tasks; the owner
// returns when done_ == n_tasks.
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
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunTasks(uint32_t gen, int thread) {
  const JobSlot& slot = slots_[gen & 1];
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (GenOf(word) != gen) return;
    // Read the job before claiming; a successful CAS below proves what we read was job `gen`.
    const TaskFn fn = slot.fn.load(std::memory_order_relaxed);
    void* ctx = slot.ctx.load(std::memory_order_relaxed);
    const int64_t n_tasks = slot.n_tasks.load(std::memory_order_relaxed);
    if (static_cast<int64_t>(IndexOf(word)) >= n_tasks) return;
    if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // word was reloaded
    }
    fn(ctx, IndexOf(word), thread);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_tasks) done_.notify_one();
    word = claim_.load(std::memory_order_acquire);
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
    RunTasks(gen, thread);
  }
}

void ThreadPool::Run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  VLMD_CHECK_MSG(n_tasks < (int64_t{1} << 31), "ParallelFor task count must fit 31 bits");
  if (workers_.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  JobSlot& slot = slots_[gen & 1];
  slot.fn.store(fn, std::memory_order_relaxed);
  slot.ctx.store(ctx, std::memory_order_relaxed);
  slot.n_tasks.store(n_tasks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  RunTasks(gen, 0);
  int64_t done = done_.load(std::memory_order_acquire);
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
