// ThreadPool: every task runs exactly once, thread ids are in range, repeated jobs work.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace vlmd {
namespace {

TEST(ThreadPoolTest, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> bad_thread{0};
      pool.ParallelFor(n, [&](int64_t task, int thread) {
        hits[task].fetch_add(1);
        if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "task " << i;
      EXPECT_EQ(bad_thread.load(), 0);
    }
  }
}

TEST(ThreadPoolTest, ManyShortJobs) {
  ThreadPool pool(2);
  int64_t total = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(4, [&](int64_t task, int) { sum.fetch_add(task + 1); });
    total += sum.load();
  }
  EXPECT_EQ(total, 2000 * 10);
}

TEST(ThreadPoolTest, SplitRangeCoversAllAligned) {
  for (int64_t n : {0, 1, 31, 32, 33, 1000}) {
    for (int64_t parts : {1, 2, 3, 8}) {
      int64_t covered = 0, prev_end = 0;
      for (int64_t i = 0; i < parts; ++i) {
        int64_t b, e;
        SplitRange(n, parts, i, 16, &b, &e);
        EXPECT_EQ(b, prev_end);
        EXPECT_LE(b, e);
        if (e < n) {
          EXPECT_EQ(e % 16, 0);
        }
        covered += e - b;
        prev_end = e;
      }
      EXPECT_EQ(covered, n);
    }
  }
}

}  // namespace
}  // namespace vlmd

namespace vlmd {
namespace {

// Jobs of alternating sizes on more threads than cores (workers are preempted mid-claim): every
// task of every job runs exactly once and no index outside a job is ever run. A worker that
// read job g's claim word late must not claim a task of job g + 1 (or one that does not exist)
// through g's claim word. A watchdog fails the test instead of hanging when the owner would wait
// forever for a miscounted job.
TEST(ThreadPoolTest, AlternatingJobSizesUnderPreemption) {
  ThreadPool pool(6);
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 1200 && !finished.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!finished.load()) {
      std::fprintf(stderr, "AlternatingJobSizesUnderPreemption: the owner hung\n");
      std::abort();
    }
  });
  std::vector<std::atomic<int>> hits(64);
  std::atomic<int> out_of_range{0};
  int64_t bad_jobs = 0;
  for (int job = 0; job < 20000 && bad_jobs == 0; ++job) {
    const int64_t n = job % 2 == 0 ? 2 : 64;
    for (int64_t t = 0; t < n; ++t) hits[t].store(0, std::memory_order_relaxed);
    pool.ParallelFor(n, [&](int64_t task, int) {
      if (task < 0 || task >= n) {
        out_of_range.fetch_add(1);
        return;
      }
      hits[task].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t t = 0; t < n; ++t) {
      if (hits[t].load() != 1) ++bad_jobs;
    }
  }
  finished.store(true);
  watchdog.join();
  EXPECT_EQ(bad_jobs, 0);
  EXPECT_EQ(out_of_range.load(), 0);
}

// A pool whose workers are busy elsewhere (or never scheduled) must not stall the owner: it runs
// every task itself. Simulated by a job whose tasks all finish before workers could join.
TEST(ThreadPoolTest, OwnerFinishesWithoutWaitingForSlowWorkers) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 500; ++rep) {
    std::vector<int> out(3, 0);
    pool.ParallelFor(3, [&](int64_t task, int) { out[task] = static_cast<int>(task) + rep; });
    for (int i = 0; i < 3; ++i) ASSERT_EQ(out[i], i + rep);
  }
}

}  // namespace
}  // namespace vlmd
