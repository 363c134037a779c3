// Quantizers and dequantizers of the 256-element "k-quant" super-block formats: Q4_K, Q5_K, Q6_K
// and the activation format Q8_K. Bit-exact with ggml's quantize_row_{q4,q5,q6,q8}_K_ref (pinned
// link in quantize.h): the scale searches below evaluate every float expression in ggml's order,
// since a single differently rounded sum can pick another candidate scale and change the bytes.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"
#include "engine/tensor/quant_fit.h"

#if defined(__clang__)
#pragma clang fp contract(off)  // see quantize_legacy.cpp
#endif

namespace vlmd::engine::quant {
namespace {

constexpr int kSub = 32;              // sub-block of Q4_K/Q5_K
constexpr int kSub6 = 16;             // sub-block of Q6_K

inline int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Fits x[i] ~= scale * L[i] - the_min with L[i] in [0, nmax] and the_min >= 0 (an affine grid
// that always covers 0), minimising the w-weighted squared error (ggml's make_qkx2_quants with
// use_mad = false). Starts from the min/max grid, then tries nstep + 1 stretched grids with
// nmax + rmin + rdelta * is steps over [min, max] and, for each, the closed-form least-squares
// scale and offset of its levels; the best grid wins. L_try is scratch of n bytes.
float FitAffineLevels(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                      int nstep, uint8_t* L, uint8_t* L_try, float* the_min) {
  float min = x[0];
  float max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    const float sq = diff * diff;
    best_error += w[i] * sq;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      L_try[i] = static_cast<uint8_t>(l);
      const float lf = static_cast<float>(l);
      sum_l += w[i] * lf;
      sum_l2 += w[i] * lf * lf;
      sum_xl += w[i] * lf * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {  // the grid must reach zero: refit the scale alone
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(L_try[i]) + this_min - x[i];
        const float sq = diff * diff;
        error += w[i] * sq;
      }
      if (error < best_error) {
        std::memcpy(L, L_try, static_cast<size_t>(n));
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Fits x[i] ~= scale * L[i] with L[i] in [0, nmax] for non-negative x (the 8 sub-block scales or
// mins of a k-quant super-block), minimising the w-weighted squared error (ggml's make_qp_quants,
// used with an importance matrix): the max-based grid and 8 stretched ones (nmax +- 0.1 is),
// then up to 5 passes that move single levels while that improves the fit. Returns the scale.
float FitScaleLevelsWeighted(const float* x, const float* w, int n, int nmax, uint8_t* L) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(NearestInt(iscale * x[i]));
  float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * L[i];
    best_mse += w[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, NearestInt(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += w[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, NearestInt(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    sumlx += w[i] * x[i] * static_cast<float>(l);
    suml2 += w[i] * static_cast<float>(l) * static_cast<float>(l);  // (w l) l, as ggml rounds
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      float slx = sumlx - w[i] * x[i] * static_cast<float>(L[i]);
      float sl2 = suml2 - w[i] * static_cast<float>(L[i]) * static_cast<float>(L[i]);
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, NearestInt(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w[i] * x[i] * static_cast<float>(new_l);
          sl2 += w[i] * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<uint8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs the 6-bit levels of the 8 sub-block scales and mins of a Q4_K/Q5_K super-block (the
// layout UnpackScaleMinK4 reads).
void PackScaleMinK4(const uint8_t* ls, const uint8_t* lm, uint8_t* packed) {
  for (int j = 0; j < kQK_K / kSub; ++j) {
    if (j < 4) {
      packed[j] = ls[j];
      packed[j + 4] = lm[j];
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

void QuantizeScalesByMax(const float* x, int nmax, float rmin, float rdelta, int nstep,
                         uint8_t* L, uint8_t* packed, uint16_t* d_out, uint16_t* dmin_out);

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits the 8 sub-blocks, quantizes their scales and
// mins to 6 bits against the super-block's d and dmin, then requantizes every value against the
// rounded scales (so L agrees with what dequantization reconstructs). Writes levels to L[256].
// With `importance` (256 values for this super-block's columns: an importance matrix's mean
// x^2), ggml's quantize_row_q{4,5}_K_impl instead: value weights importance * sqrt(sigma2 +
// x^2) with sigma2 = 2 mean(x^2) of the super-block, a finer grid search (rmin -0.9, rdelta
// 0.05, 36 steps), and scales and mins fitted by FitScaleLevelsWeighted.
void QuantizeAffineSuperBlock(const float* x, int nmax, float rmin, float rdelta, int nstep,
                              const float* importance, uint8_t* L, uint8_t* packed,
                              uint16_t* d_out, uint16_t* dmin_out) {
  float scales[kQK_K / kSub];
  float mins[kQK_K / kSub];
  float w[kSub];
  uint8_t L_try[kSub];
  if (importance != nullptr) {
    float sum_x2 = 0;
    for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / kQK_K;
    float sw[kQK_K / kSub];
    for (int j = 0; j < kQK_K / kSub; ++j) {
      const float* xs = x + kSub * j;
      const float* qw = importance + kSub * j;
      for (int l = 0; l < kSub; ++l) w[l] = qw[l] * std::sqrt(sigma2 + xs[l] * xs[l]);
      float sumw = 0;
      for (int l = 0; l < kSub; ++l) sumw += w[l];
      sw[j] = sumw;
      scales[j] = FitAffineLevels(xs, w, kSub, nmax, -0.9f, 0.05f, 36, L + kSub * j, L_try, &mins[j]);
    }
    uint8_t ls[kQK_K / kSub], lm[kQK_K / kSub];
    const float d_block = FitScaleLevelsWeighted(scales, sw, kQK_K / kSub, 63, ls);
    const float m_block = FitScaleLevelsWeighted(mins, sw, kQK_K / kSub, 63, lm);
    for (int j = 0; j < kQK_K / kSub; ++j) {
      ls[j] = std::min<uint8_t>(ls[j], 63);
      lm[j] = std::min<uint8_t>(lm[j], 63);
    }
    PackScaleMinK4(ls, lm, packed);
    *d_out = F32ToF16(d_block);
    *dmin_out = F32ToF16(m_block);
  } else {
    QuantizeScalesByMax(x, nmax, rmin, rdelta, nstep, L, packed, d_out, dmin_out);
  }
  const float d_all = F16ToF32(*d_out);
  const float dmin_all = F16ToF32(*dmin_out);
  for (int j = 0; j < kQK_K / kSub; ++j) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, packed, &sc, &m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0.0f) continue;  // keeps the fitted levels, as ggml does
    const float dm = dmin_all * static_cast<float>(m);
    for (int i = 0; i < kSub; ++i) {
      L[kSub * j + i] = static_cast<uint8_t>(Clamp(NearestInt((x[kSub * j + i] + dm) / d), 0, nmax));
    }
  }
}

// The reference path of QuantizeAffineSuperBlock up to the packed scales: each sub-block fitted
// with weights rms + |x|, its scale and min rounded against the largest ones (ggml's
// quantize_row_q{4,5}_K_ref).
void QuantizeScalesByMax(const float* x, int nmax, float rmin, float rdelta, int nstep,
                         uint8_t* L, uint8_t* packed, uint16_t* d_out, uint16_t* dmin_out) {
  float scales[kQK_K / kSub];
  float mins[kQK_K / kSub];
  float w[kSub];
  uint8_t L_try[kSub];
  float max_scale = 0;  // scales are >= 0 because the min is subtracted
  float max_min = 0;
  for (int j = 0; j < kQK_K / kSub; ++j) {
    const float* xs = x + kSub * j;
    float sum_x2 = 0;
    for (int l = 0; l < kSub; ++l) sum_x2 += xs[l] * xs[l];
    // Weights favour large values but keep small ones in play (rms + |x|).
    const float av_x = std::sqrt(sum_x2 / kSub);
    for (int l = 0; l < kSub; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = FitAffineLevels(xs, w, kSub, nmax, rmin, rdelta, nstep, L + kSub * j, L_try,
                                &mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / kSub; ++j) {
    // ggml stores nearest_int() into a uint8_t before clamping: keep that wrap-around.
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = F32ToF16(max_scale / 63.f);
  *dmin_out = F32ToF16(max_min / 63.f);
}

}  // namespace

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t k) { QuantizeRowQ4_K(x, y, k, nullptr); }
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t k) { QuantizeRowQ5_K(x, y, k, nullptr); }

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t k, const float* importance) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < k / kQK_K; ++i, x += kQK_K) {
    const float* imp = importance != nullptr ? importance + i * kQK_K : nullptr;
    QuantizeAffineSuperBlock(x, 15, -1.0f, 0.1f, 20, imp, L, y[i].scales, &y[i].d, &y[i].dmin);
    // 64 values per 32 bytes: element j in the low nibble, element j + 32 in the high one.
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t k, const float* importance) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < k / kQK_K; ++i, x += kQK_K) {
    const float* imp = importance != nullptr ? importance + i * kQK_K : nullptr;
    QuantizeAffineSuperBlock(x, 31, -0.5f, 0.1f, 15, imp, L, y[i].scales, &y[i].d, &y[i].dmin);
    // Low 4 bits as in Q4_K; bit 4 of element 64 c + j goes to qh[j] bit 2c (j < 32) and of
    // element 64 c + 32 + j to bit 2c + 1.
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t* ql = y[i].qs;
    for (int c = 0; c < kQK_K / 64; ++c, ql += 32) {
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * c));
      const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * c));
      for (int j = 0; j < 32; ++j) {
        int l1 = L[64 * c + j];
        int l2 = L[64 * c + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[j] |= bit_lo;
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[j] |= bit_hi;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t k) { QuantizeRowQ6_K(x, y, k, nullptr); }

// With importance: ggml's quantize_row_q6_K_impl, the sub-block fits weighted by the importance
// alone (no sigma2 term there).
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t k, const float* importance) {
  int8_t L[kQK_K];
  float scales[kQK_K / kSub6];
  for (int64_t i = 0; i < k / kQK_K; ++i, x += kQK_K) {
    const float* qw6 = importance != nullptr ? importance + i * kQK_K : nullptr;
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / kSub6; ++ib) {
      scales[ib] = FitSymmetricLevels(x + kSub6 * ib, kSub6, 32, L + kSub6 * ib, qw6 != nullptr ? qw6 + kSub6 * ib : nullptr);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    // 8-bit signed sub-block scales; the largest maps to -128 so the sign lives in d.
    const float iscale = -128.f / max_scale;
    y[i].d = F32ToF16(1 / iscale);
    for (int ib = 0; ib < kQK_K / kSub6; ++ib) {
      const int s = NearestInt(iscale * scales[ib]);
      y[i].scales[ib] = static_cast<int8_t>(s < 127 ? s : 127);
    }
    const float d_all = F16ToF32(y[i].d);
    for (int j = 0; j < kQK_K / kSub6; ++j) {
      const float d = d_all * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < kSub6; ++ii) {
        const int l = Clamp(NearestInt(x[kSub6 * j + ii] / d), -32, 31);
        L[kSub6 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    // Per 128 values: ql[l] = lo4(v[l]) | lo4(v[l+64]) << 4, ql[l+32] = lo4(v[l+32]) |
    // lo4(v[l+96]) << 4, qh[l] = hi2 of v[l], v[l+32], v[l+64], v[l+96] at bits 0, 2, 4, 6.
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int v0 = L[j + l], v1 = L[j + l + 32], v2 = L[j + l + 64], v3 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((v0 & 0xF) | ((v2 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((v1 & 0xF) | ((v3 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((v0 >> 4) | ((v1 >> 4) << 2) | ((v2 >> 4) << 4) |
                                     ((v3 >> 4) << 6));
      }
    }
  }
}

void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i, x += kQK_K) {
    const float max = SignedAbsMax(x, kQK_K);
    if (max == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The largest-magnitude value maps to -127 exactly (127 would do as well; ggml picked -127
    // for its IQ kernels), the others round to nearest even.
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = NearestInt(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    const float dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < kQK_K / kSub; j += 2, q += 32) {
      uint8_t sc, m;
      UnpackScaleMinK4(j, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      UnpackScaleMinK4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    const float dmin = F16ToF32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int j = 0; j < kQK_K / kSub; j += 2, ql += 32) {
      uint8_t sc, m;
      UnpackScaleMinK4(j, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      UnpackScaleMinK4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const uint8_t bit_lo = static_cast<uint8_t>(1u << j), bit_hi = static_cast<uint8_t>(2u << j);
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & bit_lo) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & bit_hi) ? 16 : 0)) - m2;
      }
    }
  }
}

void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q0);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q1);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q2);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q3);
      }
    }
  }
}

void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t k) {
  for (int64_t i = 0; i < k / kQK_K; ++i, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

}  // namespace vlmd::engine::quant
