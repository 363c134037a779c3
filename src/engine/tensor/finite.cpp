#include "engine/tensor/finite.h"

#include <cmath>
#include <cstring>

namespace vlmd::engine {
namespace {

constexpr uint32_t kExpMask = 0x7f800000u;  // all-ones exponent = inf or NaN

}  // namespace

int64_t FindNonFinite(const float* x, int64_t n) {
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
      if (!std::isfinite(x[i])) return i;
    }
  }
  return -1;
}

const char* NonFiniteName(float v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

}  // namespace vlmd::engine
