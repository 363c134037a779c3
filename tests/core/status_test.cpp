// Status / Result plumbing.
#include "core/status.h"

#include <gtest/gtest.h>

namespace vlmd {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return InvalidArgumentError("not positive: " + std::to_string(v));
  return v;
}

Result<int> Twice(int v) {
  VLMD_ASSIGN_OR_RETURN(int x, ParsePositive(v));
  return 2 * x;
}

Status CheckBoth(int a, int b) {
  VLMD_RETURN_IF_ERROR(ParsePositive(a).status());
  VLMD_RETURN_IF_ERROR(ParsePositive(b).status().WithContext("second"));
  return Status::Ok();
}

TEST(StatusTest, PropagatesValueAndError) {
  auto ok = Twice(4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 8);
  auto bad = Twice(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().ToString(), "INVALID_ARGUMENT: not positive: -1");
}

TEST(StatusTest, ContextIsPrepended) {
  EXPECT_TRUE(CheckBoth(1, 2).ok());
  Status s = CheckBoth(1, 0);
  EXPECT_EQ(s.message(), "second: not positive: 0");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vlmd
