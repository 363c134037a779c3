// VLMD_CHECK: aborts on a broken programmer invariant. Never use it for anything a file, an
// image or a request can cause: those return a Status (status.h).
#pragma once

namespace vlmd::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const char* msg);
}  // namespace vlmd::internal

#define VLMD_CHECK(cond)                                                        \
  do {                                                                          \
    if (__builtin_expect(!(cond), 0))                                           \
      ::vlmd::internal::CheckFailed(__FILE__, __LINE__, #cond, nullptr);        \
  } while (0)

#define VLMD_CHECK_MSG(cond, msg)                                               \
  do {                                                                          \
    if (__builtin_expect(!(cond), 0))                                           \
      ::vlmd::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg));          \
  } while (0)
