// How an op splits independent rows (or element ranges, or jobs) over the ThreadPool. Small
// problems run on the calling thread, where waking workers would cost more than it saves. Used
// by ops/ and by the model code built on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace vlmd::engine::ops::internal {

// Below this many elements of work an op stays on the calling thread (~10 us of elementwise work).
inline constexpr int64_t kMinParallelElements = 1 << 15;

// Range `part` of `parts` as [*begin, *end) of [0, n_items): cumulative weights (parts,
// parts - 1, ..., 1) scaled to whole units of `align` items, so the ranges shrink.
inline void ShrinkingRange(int64_t n_items, int64_t parts, int64_t part, int64_t align,
                           int64_t* begin, int64_t* end) {
  const int64_t n_units = (n_items + align - 1) / align;
  const int64_t total_weight = parts * (parts + 1) / 2;
  auto edge = [&](int64_t i) {
    const int64_t cum = i * parts - i * (i - 1) / 2;  // sum of the first i weights
    return std::min(n_items, n_units * cum / total_weight * align);
  };
  *begin = edge(part);
  *end = edge(part + 1);
}

// Calls fn(begin, end) over contiguous ranges covering [0, n_items) exactly once each, aligned to
// `align`. `work_per_item` (elements) decides whether threading pays. pool may be nullptr.
template <typename Fn>
void ForRanges(ThreadPool* pool, int64_t n_items, int64_t work_per_item, int64_t align, Fn&& fn) {
  if (n_items <= 0) return;
  const int64_t n_units = (n_items + align - 1) / align;
  if (pool == nullptr || pool->size() == 1 || n_units == 1 ||
      n_items * work_per_item < kMinParallelElements) {
    fn(int64_t{0}, n_items);
    return;
  }
  // A few ranges per thread, handed out dynamically so that a thread that was preempted (the
  // pool may share cores with other work) does not hold up the whole op, and shrinking (range i
  // weighs parts - i) so that the thread that takes the last one waits little for the others:
  // with equal ranges an op ended on average half a range (1/16 of it) after its first thread
  // ran out of work, which short decode steps paid hundreds of times per token.
  const int64_t parts = std::min<int64_t>(n_units, 4 * static_cast<int64_t>(pool->size()));
  pool->ParallelFor(parts, [&](int64_t part, int /*thread*/) {
    int64_t begin, end;
    ShrinkingRange(n_items, parts, part, align, &begin, &end);
    if (begin < end) fn(begin, end);
  });
}

// Calls fn(task, worker) once for each task in [0, n_tasks), worker in [0, pool size): over the
// pool, or in order on the calling thread without one (or with one task).
template <typename Fn>
void ForTasks(ThreadPool* pool, int64_t n_tasks, Fn&& fn) {
  if (pool == nullptr || pool->size() == 1 || n_tasks <= 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
  } else {
    pool->ParallelFor(n_tasks, fn);
  }
}

// Calls fn(job, worker) -> Status once for each job in [0, n_jobs), worker in [0, pool size),
// over the pool (inline without one). Every job runs even after another failed; returns the
// first error of the lowest-numbered worker that saw one, OK otherwise.
template <typename Fn>
Status ForJobs(ThreadPool* pool, int64_t n_jobs, Fn&& fn) {
  const int workers = pool != nullptr ? pool->size() : 1;
  std::vector<Status> errors(static_cast<size_t>(workers));
  auto run = [&](int64_t job, int worker) {
    Status s = fn(job, worker);
    Status& first = errors[static_cast<size_t>(worker)];
    if (!s.ok() && first.ok()) first = std::move(s);
  };
  ForTasks(pool, n_jobs, run);
  for (Status& s : errors) {
    if (!s.ok()) return std::move(s);
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::ops::internal
