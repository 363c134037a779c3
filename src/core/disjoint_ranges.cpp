#include "core/disjoint_ranges.h"

#include <algorithm>
#include <iterator>

namespace vlmd {

uint64_t DisjointRanges::Add(uintptr_t begin, uintptr_t end) {
  if (end <= begin) return 0;
  uint64_t already = 0;
  uintptr_t merged_begin = begin, merged_end = end;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
  while (it != ranges_.end() && it->first <= end) {  // overlapping or touching: merge
    const uintptr_t lo = std::max(it->first, begin), hi = std::min(it->second, end);
    if (hi > lo) already += hi - lo;
    merged_begin = std::min(merged_begin, it->first);
    merged_end = std::max(merged_end, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(merged_begin, merged_end);
  const uint64_t added = (end - begin) - already;
  total_ += added;
  return added;
}

std::vector<DisjointRanges::Range> DisjointRanges::Gaps(uintptr_t begin, uintptr_t end) const {
  std::vector<Range> gaps;
  ForEachGap(begin, end, [&](uintptr_t first, uintptr_t last) { gaps.emplace_back(first, last); });
  return gaps;
}

}  // namespace vlmd
