// Abort path of VLMD_CHECK.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace vlmd::internal {

void CheckFailed(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "vlmd: check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg ? " -- " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace vlmd::internal
