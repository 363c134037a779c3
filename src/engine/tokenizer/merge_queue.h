// The merge loop shared by the BPE (by merge rank) and SentencePiece (by score) encoders: a
// linked list of symbols over the input, and a priority queue of adjacent pairs. Internal to the
// tokenizer module.
#pragma once

#include <cstdint>
#include <vector>

namespace vlmd::engine::tokenizer::internal {

struct MergeSymbol {
  int prev;
  int next;
  uint32_t start;  // byte offset in the text
  uint32_t len;    // 0 once merged into its left neighbour
};

// Pops pairs best-first and merges them, re-queueing the new neighbours through
// try_add(left, right). Bigram needs members left, right and len (the combined length when it was
// queued): symbols only grow by absorbing their right neighbour, so an unchanged pair is exactly
// one whose lengths are both non-zero and still add up to the queued length.
template <typename Queue, typename TryAdd>
void RunMerges(std::vector<MergeSymbol>& symbols, Queue& queue, const TryAdd& try_add) {
  while (!queue.empty()) {
    const auto top = queue.top();
    queue.pop();
    MergeSymbol& left = symbols[top.left];
    MergeSymbol& right = symbols[top.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != top.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }
}

}  // namespace vlmd::engine::tokenizer::internal
