// F16 / BF16 conversions: exhaustive over all 16-bit patterns, round-to-nearest-even at every
// tie, and (where the CPU has F16C) bit-identity with the hardware converter.
#include "engine/tensor/fp16.h"

#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vlmd::engine {
namespace {

bool IsNanF16(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool IsNanBF16(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }
float Bits(uint32_t u) { return std::bit_cast<float>(u); }

// Value of a binary16 pattern from the format definition, in double (independent decoder).
double F16Value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  double v;
  if (exp == 0x1F) v = mant ? NAN : INFINITY;
  else if (exp == 0) v = std::ldexp(mant, -24);
  else v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

TEST(Fp16Test, F16ToF32MatchesFormatDefinitionForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (IsNanF16(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(std::isnan(f)) << h;
      // Payload moves up 13 bits unchanged (no quieting: exact conversion).
      ASSERT_EQ(std::bit_cast<uint32_t>(f), ((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13));
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), F16Value(static_cast<uint16_t>(h))) << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
  }
}

TEST(Fp16Test, RoundTripIsIdentityForAllNonNanPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = F32ToF16(F16ToF32(static_cast<uint16_t>(h)));
    if (IsNanF16(static_cast<uint16_t>(h))) {
      // NaN stays NaN with its sign and payload; only the quiet bit may be set on the way.
      ASSERT_TRUE(IsNanF16(back)) << h;
      ASSERT_EQ(back | 0x0200, h | 0x0200) << h;
    } else {
      ASSERT_EQ(back, h) << h;
    }
  }
}

// For each pair of adjacent finite halves (a, b): the exact midpoint rounds to the one with an
// even mantissa; one f32 ulp either side rounds to the nearer one. Covers every tie of F32ToF16.
TEST(Fp16Test, TiesRoundToEvenAndNeighboursToNearest) {
  for (uint16_t a = 0; a < 0x7BFF; ++a) {  // positive finite, b = a + 1 also finite
    const uint16_t b = static_cast<uint16_t>(a + 1);
    const double mid = (F16Value(a) + F16Value(b)) / 2;  // exactly representable in f32
    const float fm = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fm), mid);
    const uint16_t even = (a & 1) ? b : a;
    ASSERT_EQ(F32ToF16(fm), even) << a;
    ASSERT_EQ(F32ToF16(-fm), even | 0x8000) << a;
    ASSERT_EQ(F32ToF16(std::nextafter(fm, 0.0f)), a) << a;
    ASSERT_EQ(F32ToF16(std::nextafter(fm, INFINITY)), b) << a;
  }
}

TEST(Fp16Test, SpecialValues) {
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);                           // largest finite
  EXPECT_EQ(F32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);    // just below the tie
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);                           // tie -> even = inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7C00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xFC00);
  EXPECT_EQ(F32ToF16(INFINITY), 0x7C00);
  EXPECT_EQ(F32ToF16(-INFINITY), 0xFC00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);              // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);              // tie -> even = 0
  EXPECT_EQ(F32ToF16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);              // 1.5 ulp: tie -> 2
  EXPECT_EQ(F32ToF16(std::ldexp(5.0f, -25)), 0x0002);              // 2.5 ulp: tie -> 2
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);              // smallest normal
  EXPECT_EQ(F32ToF16(std::nextafter(std::ldexp(1.0f, -14), 0.0f)), 0x0400);  // rounds up
  EXPECT_EQ(F32ToF16(1e-30f), 0x0000);
  EXPECT_EQ(F32ToF16(-1e-30f), 0x8000);
  EXPECT_EQ(F32ToF16(Bits(0x7FC00000)), 0x7E00);                   // canonical NaN (ggml, F16C)
  EXPECT_EQ(F32ToF16(Bits(0xFFC00000)), 0xFE00);
  EXPECT_EQ(F32ToF16(Bits(0x7F800001)), 0x7E00);                   // sNaN: quieted
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0xFBFF), -65504.0f);
}

// Every f32 pattern is checked against its two candidate halves: the result must be the nearer
// one (ties: even). Strided over the 2^32 patterns to stay fast; the stride is odd so every
// exponent and low mantissa bits are hit.
TEST(Fp16Test, F32ToF16IsNearestOverStridedSweep) {
  for (uint64_t u = 0; u < (1ull << 32); u += 1021) {
    const float f = Bits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const uint16_t h = F32ToF16(f);
    const double fv = f;
    const double hv = F16Value(h);
    if (std::fabs(fv) >= 65520.0) {
      ASSERT_TRUE(std::isinf(hv)) << u;
      continue;
    }
    ASSERT_FALSE(std::isinf(hv)) << u;
    const double err = std::fabs(hv - fv);
    for (int delta : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + delta);
      if ((h & 0x7FFF) == 0 && delta == -1) continue;  // no smaller magnitude than zero
      if ((n & 0x7C00) == 0x7C00) continue;            // neighbour is inf
      const double nerr = std::fabs(F16Value(n) - fv);
      ASSERT_LE(err, nerr) << u;
      if (err == nerr) {
        ASSERT_EQ(h & 1, 0) << "tie not to even at " << u;
      }
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareF32ToF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareF16ToF32(uint16_t h) { return _cvtsh_ss(h); }

TEST(Fp16Test, BitIdenticalToF16C) {
  if (!GetCpuFeatures().f16c) GTEST_SKIP() << "CPU without F16C";
  for (uint64_t u = 0; u < (1ull << 32); u += 509) {
    const float f = Bits(static_cast<uint32_t>(u));
    ASSERT_EQ(F32ToF16(f), HardwareF32ToF16(f)) << std::hex << u;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    if (IsNanF16(static_cast<uint16_t>(h))) continue;  // hardware quiets sNaN payloads
    ASSERT_EQ(std::bit_cast<uint32_t>(F16ToF32(static_cast<uint16_t>(h))),
              std::bit_cast<uint32_t>(HardwareF16ToF32(static_cast<uint16_t>(h))))
        << h;
  }
}
#endif

TEST(Bf16Test, RoundTripIsIdentityForAllNonNanPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = BF16ToF32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), h << 16);  // exact widening
    const uint16_t back = F32ToBF16(f);
    if (IsNanBF16(static_cast<uint16_t>(h))) {
      ASSERT_EQ(back, h | 0x40) << h;  // forced quiet, payload and sign kept
    } else {
      ASSERT_EQ(back, h) << h;
    }
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  // For each adjacent positive finite pair, the midpoint (a f32 with one extra bit) ties to even.
  for (uint32_t a = 0; a < 0x7F7F; ++a) {
    const uint32_t mid = (a << 16) | 0x8000u;
    const uint16_t even = static_cast<uint16_t>((a & 1) ? a + 1 : a);
    ASSERT_EQ(F32ToBF16(Bits(mid)), even) << a;
    ASSERT_EQ(F32ToBF16(Bits(mid - 1)), a) << a;
    ASSERT_EQ(F32ToBF16(Bits(mid + 1)), a + 1) << a;
    ASSERT_EQ(F32ToBF16(Bits(mid | 0x80000000u)), even | 0x8000) << a;
  }
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);       // tie -> even
  EXPECT_EQ(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);   // tie -> even (up)
  EXPECT_EQ(F32ToBF16(Bits(0x7F7FFFFF)), 0x7F80);                  // FLT_MAX rounds to inf
  EXPECT_EQ(F32ToBF16(INFINITY), 0x7F80);
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBF16(Bits(0x7F800001)), 0x7FC0);                  // sNaN -> quiet NaN
  EXPECT_EQ(F32ToBF16(Bits(0x00000001)), 0x0000);                  // tiny subnormal -> 0
}

// The row conversion (selects instead of branches, vectorized) gives F16ToF32's bits for every
// pattern, NaN payloads and signalling NaNs included, in rows starting at three offsets and with
// a scalar tail.
TEST(Fp16Test, F16ToF32RowMatchesScalarForAllPatterns) {
  std::vector<uint16_t> all(65536 + 3);
  for (uint32_t h = 0; h < all.size(); ++h) all[h] = static_cast<uint16_t>(h * 40503u);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
    std::vector<float> got(all.size() - offset);
    F16ToF32Row(all.data() + offset, got.data(), static_cast<int64_t>(got.size()));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(F16ToF32(all[i + offset])))
          << "f16 " << all[i + offset] << " offset " << offset;
    }
  }
}

TEST(Fp16Test, RowHelpersMatchScalar) {
  float x[5] = {0.1f, -2.5f, 65504.f, 1e-6f, -0.0f};
  uint16_t h[5], b[5];
  float y[5], z[5];
  F32ToF16Row(x, h, 5);
  F32ToBF16Row(x, b, 5);
  F16ToF32Row(h, y, 5);
  BF16ToF32Row(b, z, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(h[i], F32ToF16(x[i]));
    EXPECT_EQ(b[i], F32ToBF16(x[i]));
    EXPECT_EQ(y[i], F16ToF32(h[i]));
    EXPECT_EQ(z[i], BF16ToF32(b[i]));
  }
}

}  // namespace
}  // namespace vlmd::engine
