// Internal to ops/: how an op splits independent rows (or element ranges) over the ThreadPool.
// Small problems run on the calling thread, where waking workers would cost more than it saves.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace vlmd::engine::ops::internal {

// Below this many elements of work an op stays on the calling thread (~10 us of elementwise work).
inline constexpr int64_t kMinParallelElements = 1 << 15;

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
  // A few ranges per thread: tasks are handed out dynamically, so a thread that was preempted
  // (the pool may share cores with other work) does not hold up the whole op.
  const int64_t parts = std::min<int64_t>(n_units, 4 * static_cast<int64_t>(pool->size()));
  pool->ParallelFor(parts, [&](int64_t part, int /*thread*/) {
    int64_t begin, end;
    SplitRange(n_items, parts, part, align, &begin, &end);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace vlmd::engine::ops::internal
