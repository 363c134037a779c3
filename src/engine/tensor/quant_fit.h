// Building blocks shared by the row quantizers of quantize_k.cpp and quantize_legacy.cpp (not
// part of the engine's interface): ggml's rounding and its symmetric level fit.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace vlmd::engine::quant {

// Below this a group counts as all zero (ggml's GROUP_MAX_EPS).
inline constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the rounded integer
// in the low mantissa bits. ggml's nearest_int does exactly this, and its out-of-range results
// (which some degenerate inputs reach) are part of what bit-exactness means.
inline int NearestInt(float v) {
  const float t = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(t) & 0x007FFFFFu) - 0x00400000;
}

// (int)roundf(v) (ties away from zero, ggml's Q8_0 / Q8_1 file quantizers) for |v| < 2^31, in a
// form the compiler vectorizes (roundf is a libm call per value, and GCC keeps trunc scalar
// under -ftrapping-math): v + (0.5 - 2^-25) with v's sign passes the next integer away from
// zero exactly when v's fraction is at least 1/2 (below 2^23 the sum's rounding never crosses an
// integer otherwise; from 2^23 on v is an integer and the sum rounds back to it), so the
// conversion's truncation gives roundf(v). Tested against roundf.
inline int32_t RoundHalfAway(float v) {
  return static_cast<int32_t>(v + std::copysign(0x1.fffffep-2f, v));
}

// The element of largest magnitude with its sign, the first of equal magnitudes (as ggml's loops
// keep it); 0 for an all-zero group.
inline float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = x[i] < 0.0f ? -x[i] : x[i];
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

// Fits x[i] ~= scale * (L[i] - nmax) with L[i] in [0, 2 nmax - 1] (ggml's make_qx_quants with
// rmse_type 1): the largest-magnitude element sets the first grid, then 18 grids with nmax +-
// 0.1 * is steps are tried and the one with the best weighted least-squares fit is kept. Weights
// qw[i] (an importance), or x[i]^2 when qw is nullptr. Returns the scale.
float FitSymmetricLevels(const float* x, int n, int nmax, int8_t* L, const float* qw);

}  // namespace vlmd::engine::quant
