// ThreadPool. Completion is counted in finished tasks, not in workers checking in: the owner
// claims tasks itself, so when the workers are slow to wake (an oversubscribed host) it simply
// runs the job alone and never waits on a thread that has not been scheduled yet.
//
// Protocol: the owner writes job g into slots[g & 1], then publishes claim = (g << 32) | 0 and
// bumps generation (the futex), all in one cache line. Anyone claims task i by CAS (g, i) ->
// (g, i + 1) and may only run it if the CAS succeeded, which proves job g is still current (its
// tasks are not all done, so the owner has not started writing slot (g + 2) & 1; slot (g + 1) & 1
// is the other one). With a single slot, a worker that read claim (g, n_g) - every task taken -
// could read job g + 1's larger n_tasks before the owner stored g + 1's claim word, and its CAS
// (g, n_g) -> (g, n_g + 1) would succeed on a task that does not exist. Each thread adds the
// number of tasks it ran to done_ when it finds none left (job g cannot complete before that
// count arrives, so it always counts job g); the owner returns when done_ == n_tasks.
#include "core/thread_pool.h"

#include "core/check.h"

namespace vlmd {
namespace {
// ~20-50 us of spinning: long enough to bridge the gap between consecutive kernels of one
// forward pass, short enough not to burn a core while the server is idle.
constexpr int kSpinIterations = 20000;

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}
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
  const JobSlot& slot = job_.slots[gen & 1];
  uint64_t word = job_.claim.load(std::memory_order_acquire);
  for (;;) {
    if (GenOf(word) != gen) return ran;
    // Read the job before claiming; a successful CAS below proves what we read was job `gen`.
    const TaskFn fn = slot.fn.load(std::memory_order_relaxed);
    void* ctx = slot.ctx.load(std::memory_order_relaxed);
    const int64_t n_tasks = slot.n_tasks.load(std::memory_order_relaxed);
    // Pairs with the owner's release fence before it rewrites a slot: if we read a newer job
    // than `gen`, the claim word had moved on before, and the CAS below fails.
    std::atomic_thread_fence(std::memory_order_acquire);
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
      const int64_t n_tasks = job_.slots[gen & 1].n_tasks.load(std::memory_order_relaxed);
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
  JobSlot& slot = job_.slots[gen & 1];
  // The claim word of the jobs before (g - 1's in particular) happens-before any read of what we
  // write next (see RunTasks).
  std::atomic_thread_fence(std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  slot.fn.store(fn, std::memory_order_relaxed);
  slot.ctx.store(ctx, std::memory_order_relaxed);
  slot.n_tasks.store(n_tasks, std::memory_order_relaxed);
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
