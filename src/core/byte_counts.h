// Byte counts for memory plans and budgets: whole MiB rounded up for messages, and sums that stop
// at UINT64_MAX (absurd settings or file sizes must not wrap around into a plan that fits).
#pragma once

#include <cstdint>

namespace vlmd {

inline uint64_t CeilMiB(uint64_t bytes) { return bytes / (1u << 20) + (bytes % (1u << 20) != 0); }
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace vlmd
