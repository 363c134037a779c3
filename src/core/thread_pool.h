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

// The most threads any option may ask for: far above any CPU's cores, far below where creating
// the workers fails (std::thread's constructor throws, which aborted the tools at -t 100000).
inline constexpr int kMaxThreads = 4096;

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
  // Claims and runs tasks of job `gen` until none is left; returns how many it ran (0 when the
  // job had moved on or every task was claimed).
  int64_t RunTasks(uint32_t gen, int thread);

  const int n_threads_;
  std::vector<std::thread> workers_;
  // A published job. Two slots alternate by generation so that a worker which read the claim
  // word of job g late can still read g's slot without racing the owner writing job g + 1
  // (see thread_pool.cpp).
  struct JobSlot {
    std::atomic<TaskFn> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    std::atomic<int64_t> n_tasks{0};
  };
  // Everything a worker needs to join a job, in one cache line: it gets the generation, the
  // claim word and the job in one transfer (~100 ns between the cores of the 2-vCPU VM; with
  // four lines a worker joined a job ~0.5 us late).
  struct alignas(64) JobLine {
    // Claim word: (generation << 32) | next task index. A task is claimed by a CAS that also
    // checks the generation, so a worker can never run a task of a job other than the one whose
    // slot it read.
    std::atomic<uint64_t> claim{0};
    std::atomic<uint32_t> generation{0};  // futex the sleeping workers wait on
    JobSlot slots[2];
  };
  static_assert(sizeof(JobLine) == 64, "the job must fit one cache line");
  JobLine job_;
  // Tasks of the current job finished; each thread adds its count once, when it finds no task
  // left to claim (not after every task: that moved this line between the cores per task).
  alignas(64) std::atomic<int64_t> done_{0};
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
