// Helpers for the non-matmul kernel and op tests: ISAs to sweep, seeded data, IEEE half
// conversion written independently of the engine's, and the rounding-error vocabulary the
// tolerances are derived from.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kernels/kernel_table.h"

namespace vlmd::testing {

// Unit roundoff of f32 (round to nearest): |fl(a op b) - a op b| <= kU * |a op b|.
inline constexpr double kU = 0x1p-24;
// Smallest normal float; results below it lose relative precision, so tolerances add a floor.
inline constexpr double kTiny = 0x1p-126;

// Every ISA this CPU can run (always includes ref).
inline std::vector<engine::kernels::Isa> AvailableIsas() {
  std::vector<engine::kernels::Isa> out;
  for (int i = 0; i < engine::kernels::kNumIsas; ++i) {
    const auto isa = static_cast<engine::kernels::Isa>(i);
    if (engine::kernels::IsaAvailable(isa)) out.push_back(isa);
  }
  return out;
}

// Runs check(&table) on every table of this CPU for which has(table) holds (e.g. the kernels
// of both AVX512-BF16 and AMX), each under a trace naming its ISA. False when none has it: the
// caller skips.
template <typename Has, typename Check>
bool ForEachTableWith(Has has, Check check) {
  bool ran = false;
  for (const auto isa : AvailableIsas()) {
    const auto& kt = engine::kernels::GetKernelTable(isa);
    if (!has(kt)) continue;
    SCOPED_TRACE(std::string(engine::kernels::IsaName(isa)));
    check(&kt);
    ran = true;
  }
  return ran;
}

// f32 lanes of the Highway target behind an ISA's table (ref: 1, its kernels are scalar).
inline int Lanes(engine::kernels::Isa isa) {
  switch (isa) {
    case engine::kernels::Isa::kRef: return 1;
    case engine::kernels::Isa::kAvx2:
    case engine::kernels::Isa::kAvxVnni: return 8;
    case engine::kernels::Isa::kNeon:
    case engine::kernels::Isa::kNeonDot:
    case engine::kernels::Isa::kNeonI8mm: return 4;
    default: return 16;
  }
}

// Sequential additions in a SIMD sum of n terms: ceil(n / 2L) per accumulator (two of them, plus
// one for a tail), one to merge them and log2(L) for the horizontal sum. A sum of n terms t_i
// then errs by at most SumSteps * kU * sum |t_i| (first-order bound).
inline double SumSteps(int64_t n, int lanes) {
  return std::ceil(static_cast<double>(n) / (2.0 * lanes)) + 2.0 + std::log2(lanes);
}

inline std::vector<float> RandomNormal(size_t n, uint32_t seed, float stddev = 1.0f,
                                       float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> RandomUniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// IEEE binary16 -> binary32 (exact).
inline float HalfToFloat(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double mag;
  if (exp == 0) {
    mag = std::ldexp(mant, -24);
  } else if (exp == 31) {
    mag = mant ? NAN : INFINITY;
  } else {
    mag = std::ldexp(1024 + mant, exp - 25);
  }
  return static_cast<float>((h & 0x8000) ? -mag : mag);
}

// binary32 -> binary16, round to nearest even (overflow -> inf, NaN -> quiet NaN).
inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                        // below 2^-14: subnormal half (or zero)
    float a;
    std::memcpy(&a, &x, sizeof(a));
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(static_cast<double>(a), 24)));
  }
  x += 0xfffu + ((x >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  return sign | static_cast<uint16_t>((x - (112u << 23)) >> 13);
}

}  // namespace vlmd::testing
