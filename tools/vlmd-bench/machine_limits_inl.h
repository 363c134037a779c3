// Template implementations of machine_limits.h.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace vlmd::bench {

template <typename Fn>
double MedianSeconds(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  t.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace vlmd::bench
