// DisjointRanges: each byte counts once however ranges overlap, touching ranges merge, and the
// gaps of a span are exactly what the set does not hold.
#include "core/disjoint_ranges.h"

#include <gtest/gtest.h>

namespace vlmd {
namespace {

using Ranges = std::vector<DisjointRanges::Range>;

TEST(DisjointRangesTest, EachByteCountsOnce) {
  DisjointRanges set;
  EXPECT_EQ(set.Add(100, 200), 100u);
  EXPECT_EQ(set.Add(100, 200), 0u);   // again: nothing new
  EXPECT_EQ(set.Add(150, 250), 50u);  // overlaps the end
  EXPECT_EQ(set.Add(50, 120), 50u);   // overlaps the start
  EXPECT_EQ(set.Add(300, 400), 100u);
  EXPECT_EQ(set.Add(0, 500), 500u - 300u);  // covers both, fills the gap between
  EXPECT_EQ(set.total(), 500u);
  EXPECT_EQ(set.Add(10, 10), 0u);  // empty
  EXPECT_EQ(set.Add(20, 10), 0u);  // reversed: empty
  EXPECT_EQ(set.total(), 500u);
}

TEST(DisjointRangesTest, GapsAreWhatTheSetDoesNotHold) {
  DisjointRanges set;
  EXPECT_EQ(set.Gaps(0, 100), (Ranges{{0, 100}}));
  set.Add(10, 20);
  set.Add(20, 30);  // touches: merged with [10, 20)
  set.Add(50, 60);
  EXPECT_EQ(set.Gaps(0, 100), (Ranges{{0, 10}, {30, 50}, {60, 100}}));
  EXPECT_EQ(set.Gaps(15, 55), (Ranges{{30, 50}}));  // starts and ends inside held ranges
  EXPECT_EQ(set.Gaps(12, 28), Ranges{});
  EXPECT_EQ(set.Gaps(30, 50), (Ranges{{30, 50}}));  // exactly a gap
  EXPECT_EQ(set.Gaps(60, 60), Ranges{});
  EXPECT_EQ(set.total(), 30u);
}

}  // namespace
}  // namespace vlmd
