// ConcurrencyLimit: at most `slots` held at once; a waiter gets a slot that frees within its wait
// and nothing otherwise; a slot goes back when its holder is destroyed or moved from.
#include "serve/http/concurrency_limit.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <vector>

namespace vlmd::serve {
namespace {

using std::chrono::milliseconds;

TEST(ConcurrencyLimit, HandsOutAtMostItsSlotsAndTakesThemBack) {
  ConcurrencyLimit limit(2);
  EXPECT_EQ(limit.slots(), 2);
  std::optional<ConcurrencyLimit::Slot> a = limit.Acquire(milliseconds(0));
  std::optional<ConcurrencyLimit::Slot> b = limit.Acquire(milliseconds(0));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(limit.in_use(), 2);
  EXPECT_FALSE(limit.Acquire(milliseconds(0)));
  EXPECT_FALSE(limit.Acquire(milliseconds(20)));  // none frees: the wait ends empty-handed
  a.reset();
  EXPECT_EQ(limit.in_use(), 1);
  std::optional<ConcurrencyLimit::Slot> c = limit.Acquire(milliseconds(0));
  ASSERT_TRUE(c);
  ConcurrencyLimit::Slot moved = std::move(*c);
  c.reset();  // the moved-from slot releases nothing
  EXPECT_EQ(limit.in_use(), 2);
}

TEST(ConcurrencyLimit, AWaiterGetsTheSlotReleasedDuringItsWait) {
  ConcurrencyLimit limit(1);
  std::optional<ConcurrencyLimit::Slot> held = limit.Acquire(milliseconds(0));
  ASSERT_TRUE(held);
  auto waiter = std::async(std::launch::async, [&] {
    return limit.Acquire(milliseconds(10000)).has_value();
  });
  EXPECT_EQ(waiter.wait_for(milliseconds(50)), std::future_status::timeout);  // still waiting
  held.reset();
  EXPECT_TRUE(waiter.get());
  EXPECT_EQ(limit.in_use(), 0);  // the waiter's slot went back when its optional died
}

TEST(ConcurrencyLimit, ZeroOrNegativeSlotsMeanOne) {
  ConcurrencyLimit limit(0);
  EXPECT_EQ(limit.slots(), 1);
  auto a = limit.Acquire(milliseconds(0));
  EXPECT_TRUE(a);
  EXPECT_FALSE(limit.Acquire(milliseconds(0)));
}

}  // namespace
}  // namespace vlmd::serve
