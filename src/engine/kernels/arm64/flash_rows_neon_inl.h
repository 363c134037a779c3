// The NEON row steps of the flash attention driver (flash_attention_inl.h: Rows), and the bf16
// rounding they share with the NEON bf16 row kernels (neon/tile_attention_neon.cpp):
// the AVX2 steps (x86/flash_rows_avx2_inl.h) on 4-lane groups, with bit selects for its blends.
//
// Include only from translation units compiled for aarch64 (arm64/<isa>/).
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/kernels/flash_attention_inl.h"

namespace vlmd::engine::kernels::flash {
namespace {  // internal linkage: see flash_attention_inl.h

// 2^t for t <= 8 (the softmax terms 2^(s - m)): 2^f for f = t - floor(t) in [0, 1) from the
// polynomial of the x86 versions, times 2^floor(t) written as exponent bits. t is clamped at
// -127, whose exponent field 0 makes the result exactly 0 (as the AVX2 version). NEON's fmax
// returns NaN when either operand is NaN, so a NaN passes through; +inf gives NaN (f = inf - inf),
// as the softmax documents.
inline float32x4_t Exp2Neon(float32x4_t t) {
  t = vmaxq_f32(vdupq_n_f32(-127.0f), t);
  const float32x4_t n = vrndmq_f32(t);
  const float32x4_t f = vsubq_f32(t, n);
  float32x4_t p = vdupq_n_f32(0.0135341605f);
  p = vfmaq_f32(vdupq_n_f32(0.0520114748f), p, f);
  p = vfmaq_f32(vdupq_n_f32(0.241442748f), p, f);
  p = vfmaq_f32(vdupq_n_f32(0.693003836f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.00000259f), p, f);
  // n is integral (or NaN, which fcvtzs makes 0: p is NaN then anyway).
  const int32x4_t scale = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(scale));
}

// 4 floats -> bf16, F32ToBF16's integer steps bit for bit (round to nearest even, NaN quiet).
inline uint16x4_t RoundToBf16x4(float32x4_t x) {
  const uint32x4_t u = vreinterpretq_u32_f32(x);
  const uint32x4_t high = vshrq_n_u32(u, 16);
  const uint32x4_t odd = vandq_u32(high, vdupq_n_u32(1));
  const uint32x4_t rounded =
      vshrq_n_u32(vaddq_u32(u, vaddq_u32(odd, vdupq_n_u32(0x7FFF))), 16);
  const uint32x4_t not_nan = vceqq_f32(x, x);
  return vmovn_u32(vbslq_u32(not_nan, rounded, vorrq_u32(high, vdupq_n_u32(0x40))));
}

// Lanes [j, j + 4) that lie in [lo, hi), as an all-ones / zero lane mask (j, lo, hi < 2^31).
inline uint32x4_t LanesIn4(int64_t j, int64_t lo, int64_t hi) {
  static constexpr int32_t kIota[4] = {0, 1, 2, 3};
  const int32x4_t idx = vaddq_s32(vdupq_n_s32(static_cast<int32_t>(j)), vld1q_s32(kIota));
  return vandq_u32(vcgeq_s32(idx, vdupq_n_s32(static_cast<int32_t>(lo))),
                   vcltq_s32(idx, vdupq_n_s32(static_cast<int32_t>(hi))));
}

// Rows of 4-lane groups from the one holding lo. The score rows are read in whole groups (the
// driver's s block is 64-byte aligned, its rows kSStride apart, so a group never leaves its row):
// lanes outside [lo, hi) hold the chunk's scores of keys the row does not see, or the padding
// keys' zeros, and are selected away.
struct NeonRows {
  static float Max(const float* s, int64_t lo, int64_t hi) {
    float32x4_t vmax = vdupq_n_f32(-INFINITY);
    const int64_t j0 = hi > lo ? lo / 4 * 4 : 0, j1 = hi > lo ? hi : 0;
    for (int64_t j = j0; j < j1; j += 4) {
      // fmaxnm returns the number when one operand is NaN: NaN scores are skipped.
      vmax = vbslq_f32(LanesIn4(j, lo, hi), vmaxnmq_f32(vld1q_f32(s + j), vmax), vmax);
    }
    return vmaxvq_f32(vmax);
  }

  static void Scale(float* o, int64_t n, float alpha) {
    for (int64_t e = 0; e < n; e += 4) vst1q_f32(o + e, vmulq_n_f32(vld1q_f32(o + e), alpha));
  }

  // Rows::Exp of flash_attention_inl.h: with kCheck, false when a score of [lo, hi) exceeds
  // limit.
  template <bool kCheck>
  static bool Exp(const float* s, int64_t lo, int64_t hi, int64_t nk_pad, float m, float limit,
                  uint16_t* p, float* sum) {
    const int64_t j0 = hi > lo ? lo / 4 * 4 : 0, j1 = hi > lo ? hi : 0;
    const float32x4_t vm = vdupq_n_f32(m), vlimit = vdupq_n_f32(limit);
    float32x4_t vsum = vdupq_n_f32(0.0f);
    uint32x4_t over = vdupq_n_u32(0);
    std::fill(p, p + j0, uint16_t{0});
    for (int64_t j = j0; j < j1; j += 4) {
      const uint32x4_t in = LanesIn4(j, lo, hi);
      const float32x4_t x = vld1q_f32(s + j);
      if constexpr (kCheck) over = vorrq_u32(over, vandq_u32(in, vcgtq_f32(x, vlimit)));
      const float32x4_t e = vreinterpretq_f32_u32(
          vandq_u32(in, vreinterpretq_u32_f32(Exp2Neon(vsubq_f32(x, vm)))));
      vsum = vaddq_f32(vsum, e);
      vst1_u16(p + j, RoundToBf16x4(e));  // zeros outside [lo, hi)
    }
    if (vmaxvq_u32(over) != 0) return false;
    std::fill(p + std::max(j0, (j1 + 3) / 4 * 4), p + nk_pad, uint16_t{0});
    *sum = vaddvq_f32(vsum);
    return true;
  }

  static void Store(const float* o, float inv, int64_t n, uint16_t* out) {
    for (int64_t e = 0; e < n; e += 4) {
      const uint16x4_t b = RoundToBf16x4(vmulq_n_f32(vld1q_f32(o + e), inv));
      if (n - e >= 4) {
        vst1_u16(out + e, b);
      } else {
        uint16_t part[4];
        vst1_u16(part, b);
        std::copy(part, part + (n - e), out + e);
      }
    }
  }
};

}  // namespace
}  // namespace vlmd::engine::kernels::flash
