// ConcurrencyLimit: at most `slots` held at once; a waiter gets a slot that frees within its wait
// and nothing otherwise; at most `slots` wait, later callers are refused at once; a slot goes
// back when its holder is destroyed, not when it is moved from.
#include "serve/http/concurrency_limit.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <thread>

namespace vlmd::serve {
namespace {

using std::chrono::milliseconds;

// Spins until `limit` has `n` waiters (they block in Acquire), up to 10 s.
bool WaitForWaiters(const ConcurrencyLimit& limit, int n) {
  for (int i = 0; i < 10000 && limit.waiting() != n; ++i) std::this_thread::sleep_for(milliseconds(1));
  return limit.waiting() == n;
}

TEST(ConcurrencyLimit, HandsOutAtMostItsSlotsAndTakesThemBack) {
  ConcurrencyLimit limit(2);
  EXPECT_EQ(limit.slots(), 2);
  std::optional<ConcurrencyLimit::Slot> a = limit.Acquire(milliseconds(0));
  std::optional<ConcurrencyLimit::Slot> b = limit.Acquire(milliseconds(0));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(limit.in_use(), 2);
  EXPECT_FALSE(limit.Acquire(milliseconds(0)));
  EXPECT_FALSE(limit.Acquire(milliseconds(20)));  // none frees: the wait ends empty-handed
  EXPECT_EQ(limit.waiting(), 0);
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
  ASSERT_TRUE(WaitForWaiters(limit, 1));  // it is inside its wait, not yet started
  held.reset();
  EXPECT_TRUE(waiter.get());
  EXPECT_EQ(limit.in_use(), 0);  // the waiter's slot went back when its optional died
  EXPECT_EQ(limit.waiting(), 0);
}

TEST(ConcurrencyLimit, AtMostSlotsWaitAndLaterCallersAreRefusedAtOnce) {
  ConcurrencyLimit limit(1);
  std::optional<ConcurrencyLimit::Slot> held = limit.Acquire(milliseconds(0));
  ASSERT_TRUE(held);
  auto waiter = std::async(std::launch::async, [&] {
    return limit.Acquire(milliseconds(10000)).has_value();
  });
  ASSERT_TRUE(WaitForWaiters(limit, 1));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(limit.Acquire(milliseconds(10000)));  // a second waiter: refused, no wait
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(5000));
  held.reset();
  EXPECT_TRUE(waiter.get());
}

TEST(ConcurrencyLimit, ZeroOrNegativeSlotsMeanOne) {
  for (int slots : {0, -3}) {
    ConcurrencyLimit limit(slots);
    EXPECT_EQ(limit.slots(), 1);
    auto a = limit.Acquire(milliseconds(0));
    EXPECT_TRUE(a);
    EXPECT_FALSE(limit.Acquire(milliseconds(0)));
  }
}

}  // namespace
}  // namespace vlmd::serve
