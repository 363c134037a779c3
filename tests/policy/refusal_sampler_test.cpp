// Refusals before authentication, sampled per address and interval, driven with injected times.
#include "serve/policy/refusal_sampler.h"

#include <gtest/gtest.h>

#include <limits>

namespace vlmd::serve::policy {
namespace {

TEST(RefusalSampler, FirstOfAnIntervalIsWrittenTheRestSummedOnce) {
  RefusalSampler s(10.0);
  EXPECT_TRUE(s.Admit("10.0.0.1", 100.0));
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(s.Admit("10.0.0.1", 100.0 + i)) << i;
  EXPECT_TRUE(s.Admit("10.0.0.2", 101.0));  // another address: its own interval
  EXPECT_TRUE(s.TakeEnded(109.9).empty());  // nothing over yet
  const auto ended = s.TakeEnded(110.0);
  ASSERT_EQ(ended.size(), 1u);  // 10.0.0.2 left nothing out: no summary
  EXPECT_EQ(ended[0].addr, "10.0.0.1");
  EXPECT_EQ(ended[0].left_out, 5u);
  EXPECT_EQ(ended[0].first_s, 100.0);
  EXPECT_EQ(ended[0].last_s, 105.0);
  EXPECT_TRUE(s.TakeEnded(110.0).empty());  // each interval once
  EXPECT_TRUE(s.Admit("10.0.0.1", 111.0));  // a new interval
  EXPECT_TRUE(s.TakeEnded(std::numeric_limits<double>::infinity()).empty());
}

TEST(RefusalSampler, AnIntervalReplacedBeforeItsSummaryKeepsItsCount) {
  RefusalSampler s(10.0);
  EXPECT_TRUE(s.Admit("a", 0.0));
  EXPECT_FALSE(s.Admit("a", 1.0));
  EXPECT_FALSE(s.Admit("a", 2.0));
  EXPECT_TRUE(s.Admit("a", 12.0));   // over, not yet summarized: a new interval starts
  EXPECT_FALSE(s.Admit("a", 13.0));
  const auto first = s.TakeEnded(12.5);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].left_out, 2u);
  EXPECT_EQ(first[0].last_s, 2.0);
  const auto rest = s.TakeEnded(std::numeric_limits<double>::infinity());  // shutdown
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].left_out, 1u);
}

TEST(RefusalSampler, ManyAddressesShareOneEntryPastTheLimit) {
  RefusalSampler s(10.0, /*max_addresses=*/2);
  EXPECT_TRUE(s.Admit("a", 0.0));
  EXPECT_TRUE(s.Admit("b", 0.0));
  EXPECT_TRUE(s.Admit("c", 0.0));   // the shared entry's first line
  EXPECT_FALSE(s.Admit("d", 1.0));  // counted in the shared entry
  EXPECT_FALSE(s.Admit("e", 1.0));
  EXPECT_FALSE(s.Admit("a", 1.0));  // a known address keeps its own entry
  auto ended = s.TakeEnded(10.0);
  ASSERT_EQ(ended.size(), 2u);  // by address: "*" sorts before "a"
  EXPECT_EQ(ended[0].addr, "*");
  EXPECT_EQ(ended[0].left_out, 2u);
  EXPECT_EQ(ended[1].addr, "a");
  EXPECT_EQ(ended[1].left_out, 1u);
}

// A refusal no thread was free to write (a flood filling the queue) is counted as left out in
// its address's interval, opening one when none is, and summarized as the others.
TEST(RefusalSampler, RefusalsThatCannotBeWrittenAreCountedInTheSummary) {
  RefusalSampler s(10.0);
  EXPECT_TRUE(s.Admit("a", 0.0));
  s.CountLeftOut("a", 1.0);
  s.CountLeftOut("b", 2.0);          // no interval open for b: one opens, its line left out
  EXPECT_FALSE(s.Admit("b", 3.0));   // b's interval is open: the next is counted too
  s.CountLeftOut("a", 12.0);         // a's interval is over: kept, a new one starts
  auto ended = s.TakeEnded(12.5);
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0].addr, "a");
  EXPECT_EQ(ended[0].left_out, 1u);
  EXPECT_EQ(ended[1].addr, "b");
  EXPECT_EQ(ended[1].left_out, 2u);
  ended = s.TakeEnded(std::numeric_limits<double>::infinity());
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].left_out, 1u);
  RefusalSampler off(0.0);
  off.CountLeftOut("a", 0.0);  // nothing to summarize into
  EXPECT_TRUE(off.TakeEnded(std::numeric_limits<double>::infinity()).empty());
}

TEST(RefusalSampler, ZeroIntervalWritesEveryRefusal) {
  RefusalSampler s(0.0);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(s.Admit("a", i));
  EXPECT_TRUE(s.TakeEnded(std::numeric_limits<double>::infinity()).empty());
}

}  // namespace
}  // namespace vlmd::serve::policy
