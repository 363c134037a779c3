// A set of disjoint half-open address ranges [begin, end), merged as they are added: which pages of
// a buffer have been given back to the kernel, so that each is counted, wiped and released once.
// Not thread-safe: the owner locks.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace vlmd {

class DisjointRanges {
 public:
  using Range = std::pair<uintptr_t, uintptr_t>;  // [first, second)

  // Adds [begin, end), merging the ranges it overlaps or touches; returns how many of its bytes
  // the set did not hold before (0 for an empty range).
  uint64_t Add(uintptr_t begin, uintptr_t end);

  // The parts of [begin, end) the set does not hold, in address order.
  std::vector<Range> Gaps(uintptr_t begin, uintptr_t end) const;
  // The same, each passed to fn(first, last) as found: allocates nothing (for a destructor).
  template <typename Fn>
  void ForEachGap(uintptr_t begin, uintptr_t end, Fn&& fn) const {
    if (end <= begin) return;
    uintptr_t at = begin;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second > begin) --it;
    for (; it != ranges_.end() && it->first < end && at < end; ++it) {
      if (it->first > at) fn(at, it->first);
      if (it->second > at) at = it->second;
    }
    if (at < end) fn(at, end);
  }

  // The bytes the set holds.
  uint64_t total() const { return total_; }

 private:
  std::map<uintptr_t, uintptr_t> ranges_;  // begin -> end, disjoint and not touching
  uint64_t total_ = 0;
};

}  // namespace vlmd
