// CheckFinite: a branch-free scan in blocks (the compiler vectorizes it), then an exact search
// for the first bad index only when a block fails.
#include "engine/ops/numerics.h"

#include <cmath>
#include <cstring>
#include <string>

namespace vlmd::engine::ops {
namespace {

constexpr uint32_t kExpMask = 0x7f800000u;  // all-ones exponent = inf or NaN

}  // namespace

Status CheckFinite(const float* x, int64_t n, std::string_view name) {
  constexpr int64_t kBlock = 1024;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = b + kBlock < n ? b + kBlock : n;
    uint32_t bad = 0;
    for (int64_t i = b; i < e; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof(bits));
      bad |= static_cast<uint32_t>((bits & kExpMask) == kExpMask);
    }
    if (bad == 0) continue;
    for (int64_t i = b; i < e; ++i) {
      if (!std::isfinite(x[i])) {
        const char* what = std::isnan(x[i]) ? "nan" : (x[i] > 0 ? "inf" : "-inf");
        return InternalError("non-finite value " + std::string(what) + " at index " +
                             std::to_string(i) + " of " + std::to_string(n) + " in tensor '" +
                             std::string(name) + "'");
      }
    }
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::ops
