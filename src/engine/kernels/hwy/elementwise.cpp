// Highway SIMD kernels for the non-matmul slots (norms, softmax, activations, rope, attention
// rows). foreach_target.h recompiles this file once per Highway target; only the AVX2, AVX3 and
// (on aarch64) NEON passes emit code, each ending in a filler (FillHwyOpsAvx2 / FillHwyOpsAvx512 /
// FillHwyOpsNeon) that points the KernelTable slots at its own namespace. Dispatch stays the KernelTable: no HWY_DYNAMIC_DISPATCH.
//
// Numerics: f32 lanes throughout. Reductions keep two vector accumulators, so a sum of n terms
// takes about n / (2 * lanes) sequential additions (the bound the tests derive tolerances from).
// Transcendentals come from hwy/contrib/math (Exp: 1 ulp, on [-FLT_MAX, 104]); arguments of Exp
// are clamped to <= kExpArgMax so that overflow yields +inf rather than an out-of-range result.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/kernels/hwy/elementwise.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/kernels/hwy/hwy_fill.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace vlmd::engine::kernels {
namespace HWY_NAMESPACE {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_NEON

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DH = hn::Rebind<hwy::float16_t, DF>;  // as many f16 lanes as DF has f32 lanes

// exp(100) is already +inf in f32; clamping keeps Exp inside its documented valid range.
constexpr float kExpArgMax = 100.0f;

// Exp(min(arg, kExpArgMax)) that keeps NaN: hn::Min would turn a NaN argument into kExpArgMax
// (and Exp maps NaN to 0), hiding a numerical failure that CheckFinite should report.
HWY_INLINE VF ExpClamped(DF d, VF arg) {
  const VF e = hn::Exp(d, hn::Min(arg, hn::Set(d, kExpArgMax)));
  return hn::IfThenElse(hn::IsNaN(arg), arg, e);
}

// The first min(remaining, lanes) floats at p (callers pass what is left of the row); lanes past
// them read as 0 and are never written.
// x86 has masked loads and stores that leave the other lanes' memory alone. Highway's NEON
// MaskedLoad / BlendedStore load (and store back) the whole vector: that reads past the end of a
// buffer, and the store rewrites the floats after p with the values it read, racing with the
// thread that owns them (rows split over threads: a flaky ops test caught it under qemu). On
// NEON the tail goes through a stack buffer instead.
// FirstN's clamp of `remaining` to the lanes.
HWY_INLINE size_t TailLanes(DF d, int64_t remaining) {
  return std::min(static_cast<size_t>(remaining), hn::Lanes(d));
}
HWY_INLINE VF LoadTail(DF d, const float* p, int64_t remaining) {
#if HWY_TARGET == HWY_NEON
  alignas(64) float buf[hn::MaxLanes(DF())] = {};
  std::memcpy(buf, p, TailLanes(d, remaining) * sizeof(float));
  return hn::Load(d, buf);
#else
  return hn::MaskedLoad(hn::FirstN(d, static_cast<size_t>(remaining)), d, p);
#endif
}
HWY_INLINE void StoreTail(VF v, DF d, float* p, int64_t remaining) {
#if HWY_TARGET == HWY_NEON
  alignas(64) float buf[hn::MaxLanes(DF())];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, TailLanes(d, remaining) * sizeof(float));
#else
  hn::BlendedStore(v, hn::FirstN(d, static_cast<size_t>(remaining)), d, p);
#endif
}

// y[i] = f(x[i]); masked tail lanes see 0, which every f here maps to a finite value.
template <class F>
HWY_INLINE void MapUnary(const float* x, float* y, int64_t n, F f) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) StoreTail(f(d, LoadTail(d, x + i, n - i)), d, y + i, n - i);
}

// x * sigmoid(k x) = x / (1 + exp(-k x)): no cancellation for negative x, and the clamped Exp
// turns large -k x into +inf, so the result is the correctly signed zero.
// x / (1 + e^arg) for any arg: with z = e^-|arg| in [0, 1], 1 / (1 + e^arg) is z / (1 + z) for
// arg >= 0 and 1 / (1 + z) otherwise, so e^arg never overflows and the denominator stays in
// [1, 2], where the reciprocal estimate refined by Newton steps is within ~1 ulp (a vector
// divide costs several times more).
HWY_INLINE VF DivOnePlusExp(DF d, VF x, VF arg) {
  const VF z = hn::Exp(d, hn::Neg(hn::Abs(arg)));
  const VF den = hn::Add(hn::Set(d, 1.0f), z);
  VF r = hn::ApproximateReciprocal(den);  // AVX-512: 14 bits; AVX2: 12 bits; NEON: 8 bits
  r = hn::Mul(r, hn::NegMulAdd(den, r, hn::Set(d, 2.0f)));
#if HWY_TARGET != HWY_AVX3  // a 12- or 8-bit estimate needs a second step
  r = hn::Mul(r, hn::NegMulAdd(den, r, hn::Set(d, 2.0f)));
#endif
  const VF num = hn::IfThenElse(hn::Lt(arg, hn::Zero(d)), hn::Set(d, 1.0f), z);
  return hn::Mul(hn::Mul(x, num), r);
}

HWY_INLINE VF XSigmoid(DF d, VF x, VF neg_k) { return DivOnePlusExp(d, x, hn::Mul(neg_k, x)); }

// ---------------------------------------------------------------------------------------------
// Norms

float SumOfSquares(const float* x, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  VF acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const VF a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + i + lanes);
    acc0 = hn::MulAdd(a, a, acc0);
    acc1 = hn::MulAdd(b, b, acc1);
  }
  for (; i < n; i += lanes) {
    const VF a = LoadTail(d, x + i, n - i);  // zero lanes past n
    acc0 = hn::MulAdd(a, a, acc0);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
}

void RmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  const float scale = 1.0f / std::sqrt(SumOfSquares(x, n) / static_cast<float>(n) + eps);
  const DF d;
  const VF vscale = hn::Set(d, scale);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n; i += lanes) {
    const int64_t rem = n - i;
    const bool full = rem >= lanes;
    VF v = hn::Mul(full ? hn::LoadU(d, x + i) : LoadTail(d, x + i, rem), vscale);
    if (weight) v = hn::Mul(v, full ? hn::LoadU(d, weight + i) : LoadTail(d, weight + i, rem));
    if (full) {
      hn::StoreU(v, d, y + i);
    } else {
      StoreTail(v, d, y + i, rem);
    }
  }
}

void LayerNorm(const float* x, const float* weight, const float* bias, float* y, int64_t n,
               float eps) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  VF acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::Add(acc0, hn::LoadU(d, x + i));
    acc1 = hn::Add(acc1, hn::LoadU(d, x + i + lanes));
  }
  for (; i < n; i += lanes) acc0 = hn::Add(acc0, LoadTail(d, x + i, n - i));
  const float mean = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1))) / static_cast<float>(n);

  // Second pass on the centred values: no cancellation as with E[x^2] - mean^2.
  const VF vmean = hn::Set(d, mean);
  acc0 = hn::Zero(d);
  acc1 = hn::Zero(d);
  for (i = 0; i + 2 * lanes <= n; i += 2 * lanes) {
    const VF a = hn::Sub(hn::LoadU(d, x + i), vmean);
    const VF b = hn::Sub(hn::LoadU(d, x + i + lanes), vmean);
    acc0 = hn::MulAdd(a, a, acc0);
    acc1 = hn::MulAdd(b, b, acc1);
  }
  for (; i < n; i += lanes) {
    const int64_t rem = n - i;
    const VF a = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(rem)),
                                    hn::Sub(LoadTail(d, x + i, rem), vmean));
    acc0 = hn::MulAdd(a, a, acc0);
  }
  const float var = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1))) / static_cast<float>(n);
  const VF vrstd = hn::Set(d, 1.0f / std::sqrt(var + eps));

  for (i = 0; i < n; i += lanes) {
    const int64_t rem = n - i;
    const bool full = rem >= lanes;
    VF v = hn::Mul(hn::Sub(full ? hn::LoadU(d, x + i) : LoadTail(d, x + i, rem), vmean), vrstd);
    if (weight) v = hn::Mul(v, full ? hn::LoadU(d, weight + i) : LoadTail(d, weight + i, rem));
    if (bias) v = hn::Add(v, full ? hn::LoadU(d, bias + i) : LoadTail(d, bias + i, rem));
    if (full) {
      hn::StoreU(v, d, y + i);
    } else {
      StoreTail(v, d, y + i, rem);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax

float MaxOf(const float* x, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  VF m = neg_inf;
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) m = hn::Max(m, hn::LoadU(d, x + i));
  if (i < n) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    m = hn::Max(m, hn::IfThenElse(mask, LoadTail(d, x + i, n - i), neg_inf));
  }
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

float ExpSubSum(const float* x, float max, float* y, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF vmax = hn::Set(d, max);
  VF sum = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const VF e = ExpClamped(d, hn::Sub(hn::LoadU(d, x + i), vmax));
    hn::StoreU(e, d, y + i);
    sum = hn::Add(sum, e);
  }
  if (i < n) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    const VF e =
        hn::IfThenElseZero(mask, ExpClamped(d, hn::Sub(LoadTail(d, x + i, n - i), vmax)));
    StoreTail(e, d, y + i, n - i);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

void Scale(float* x, float s, int64_t n) {
  MapUnary(x, x, n, [s](DF d, VF v) HWY_ATTR { return hn::Mul(v, hn::Set(d, s)); });
}

void Softmax(float* x, int64_t n) {
  const float max = MaxOf(x, n);
  if (max == -std::numeric_limits<float>::infinity()) {
    // Only -inf and NaN here (rare): NaN -> all NaN, a fully masked row -> zeros, as in ref.
    bool has_nan = false;
    for (int64_t i = 0; i < n; ++i) has_nan |= std::isnan(x[i]);
    const float fill = has_nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    MapUnary(x, x, n, [fill](DF d, VF) HWY_ATTR { return hn::Set(d, fill); });
    return;
  }
  const float sum = ExpSubSum(x, max, x, n);  // >= 1: the max element contributes exp(0)
  Scale(x, 1.0f / sum, n);
}

// ---------------------------------------------------------------------------------------------
// Activations

void Silu(const float* x, float* y, int64_t n) {
  MapUnary(x, y, n, [](DF d, VF v) HWY_ATTR { return XSigmoid(d, v, hn::Set(d, -1.0f)); });
}

// f32 -> f16 -> f32: round to nearest even, overflow to inf, NaN kept (vcvtps2ph with F16C).
void RoundF16(const float* x, float* y, int64_t n) {
  MapUnary(x, y, n, [](DF d, VF v) HWY_ATTR { return hn::PromoteTo(d, hn::DemoteTo(DH(), v)); });
}

void GeluQuick(const float* x, float* y, int64_t n) {
  MapUnary(x, y, n, [](DF d, VF v) HWY_ATTR { return XSigmoid(d, v, hn::Set(d, -1.702f)); });
}

// 0.5 x (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3); the sigmoid form
// needs one Exp and avoids the cancellation of 1 + tanh(u) for negative x.
void GeluTanh(const float* x, float* y, int64_t n) {
  MapUnary(x, y, n, [](DF d, VF v) HWY_ATTR {
    const VF x2 = hn::Mul(v, v);
    const VF inner = hn::MulAdd(hn::Set(d, 0.044715f), x2, hn::Set(d, 1.0f));
    const VF neg_two_u = hn::Mul(hn::Mul(v, inner), hn::Set(d, -2.0f * 0.7978845608f));
    return DivOnePlusExp(d, v, neg_two_u);
  });
}

// erfc(z) for z >= 0 as t * exp(-z^2 + P(t)), t = 1 / (1 + z/2): the Chebyshev fit of Press et
// al., Numerical Recipes in C, 2nd ed., sec. 6.2 (erfcc), fractional error < 1.2e-7 for all z.
// Being relative, the bound also holds in the far tail, so gelu_erf(x) for x << 0 stays accurate.
HWY_INLINE VF Erfc(DF d, VF z) {
  const VF t = hn::Div(hn::Set(d, 1.0f), hn::MulAdd(hn::Set(d, 0.5f), z, hn::Set(d, 1.0f)));
  VF p = hn::Set(d, 0.17087277f);
  p = hn::MulAdd(p, t, hn::Set(d, -0.82215223f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.48851587f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.13520398f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.27886807f));
  p = hn::MulAdd(p, t, hn::Set(d, -0.18628806f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.09678418f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.37409196f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.00002368f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.26551223f));
  // -z^2 + p; z = inf gives -inf and Exp(-inf) = 0.
  return hn::Mul(t, hn::Exp(d, hn::NegMulAdd(z, z, p)));
}

// 0.5 x (1 + erf(x / sqrt2)) = x * Phi(x), Phi(x) = erfc(|x|/sqrt2)/2 for x < 0, else 1 - that.
void GeluErf(const float* x, float* y, int64_t n) {
  MapUnary(x, y, n, [](DF d, VF v) HWY_ATTR {
    const VF half_erfc = hn::Mul(hn::Set(d, 0.5f),
                                 Erfc(d, hn::Mul(hn::Abs(v), hn::Set(d, 0.70710678118654752f))));
    const VF phi = hn::IfThenElse(hn::Lt(v, hn::Zero(d)), half_erfc,
                                  hn::Sub(hn::Set(d, 1.0f), half_erfc));
    return hn::Mul(v, phi);
  });
}

void SwiGlu(const float* a, const float* b, float* y, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF neg_one = hn::Set(d, -1.0f);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(XSigmoid(d, hn::LoadU(d, a + i), neg_one), hn::LoadU(d, b + i)), d, y + i);
  }
  if (i < n) {
    const int64_t rem = n - i;
    StoreTail(hn::Mul(XSigmoid(d, LoadTail(d, a + i, rem), neg_one), LoadTail(d, b + i, rem)), d,
              y + i, rem);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE

void Rope(float* x, int64_t n_heads, int64_t head_stride, const float* cos_sin, int64_t n_rot,
          bool neox) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t half = n_rot / 2;
  const float* cos_t = cos_sin;
  const float* sin_t = cos_sin + half;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_stride;
    int64_t i = 0;
    if (neox) {
      // Pairs (i, i + half): the two halves are contiguous, so plain loads suffice.
      for (; i < half; i += lanes) {
        const int64_t rem = half - i;
        const bool full = rem >= lanes;
        const VF x0 = full ? hn::LoadU(d, head + i) : LoadTail(d, head + i, rem);
        const VF x1 = full ? hn::LoadU(d, head + half + i) : LoadTail(d, head + half + i, rem);
        const VF c = full ? hn::LoadU(d, cos_t + i) : LoadTail(d, cos_t + i, rem);
        const VF s = full ? hn::LoadU(d, sin_t + i) : LoadTail(d, sin_t + i, rem);
        const VF y0 = hn::MulSub(x0, c, hn::Mul(x1, s));
        const VF y1 = hn::MulAdd(x0, s, hn::Mul(x1, c));
        if (full) {
          hn::StoreU(y0, d, head + i);
          hn::StoreU(y1, d, head + half + i);
        } else {
          StoreTail(y0, d, head + i, rem);
          StoreTail(y1, d, head + half + i, rem);
        }
      }
    } else {
      // Adjacent pairs (2i, 2i+1): deinterleave lanes-many pairs, rotate, interleave back.
      for (; i + lanes <= half; i += lanes) {
        VF x0, x1;
        hn::LoadInterleaved2(d, head + 2 * i, x0, x1);
        const VF c = hn::LoadU(d, cos_t + i), s = hn::LoadU(d, sin_t + i);
        const VF y0 = hn::MulSub(x0, c, hn::Mul(x1, s));
        const VF y1 = hn::MulAdd(x0, s, hn::Mul(x1, c));
        hn::StoreInterleaved2(y0, y1, d, head + 2 * i);
      }
      for (; i < half; ++i) {  // fewer than `lanes` pairs left
        const float x0 = head[2 * i], x1 = head[2 * i + 1];
        head[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
        head[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Attention rows (KV cache in F32 or F16)

struct F32Rows {
  static HWY_INLINE VF Load(DF d, const void* row, int64_t i) {
    return hn::LoadU(d, static_cast<const float*>(row) + i);
  }
  static HWY_INLINE VF LoadTail(DF d, const void* row, int64_t i, int64_t rem) {
    return HWY_NAMESPACE::LoadTail(d, static_cast<const float*>(row) + i, rem);
  }
};

struct F16Rows {
  static HWY_INLINE VF Load(DF d, const void* row, int64_t i) {
    const DH dh;
    return hn::PromoteTo(d, hn::LoadU(dh, static_cast<const hwy::float16_t*>(row) + i));
  }
  // A masked load of 16-bit lanes is emulated on AVX2 by a full load, which could read past the
  // row; copy the tail into a zeroed buffer instead.
  static HWY_INLINE VF LoadTail(DF d, const void* row, int64_t i, int64_t rem) {
    const DH dh;
    alignas(64) hwy::float16_t buf[hn::MaxLanes(DH())];
    std::memset(buf, 0, sizeof(buf));
    std::memcpy(buf, static_cast<const hwy::float16_t*>(row) + i,
                static_cast<size_t>(rem) * sizeof(hwy::float16_t));
    return hn::PromoteTo(d, hn::Load(dh, buf));
  }
};

// The lane sums of four vectors into out[0..3]. One horizontal sum per row was most of a
// decode attention step's time at long contexts (~11 cycles per row and head); here pairwise
// interleaves leave, in every 128-bit block, that block's partial sums of the four vectors,
// and the blocks are added: about a quarter of the shuffles per row.
// (This file compiles for AVX2 and AVX-512 only: every vector has whole 128-bit blocks.)
HWY_INLINE void SumsOf4(DF d, VF a, VF b, VF c, VF e, float* out) {
  // Per block: [a0 + a2, b0 + b2, a1 + a3, b1 + b3], and the same for c, e.
  const VF ab = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const VF ce = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  // 64-bit lanes as containers: per block [a, b, c, e].
  const hn::Repartition<uint64_t, DF> d64;
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const VF sums = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, ab64, ce64)),
                          hn::BitCast(d, hn::InterleaveUpper(d64, ab64, ce64)));
  HWY_ALIGN float buf[hn::MaxLanes(DF())];
  hn::Store(sums, d, buf);
  const hn::Full128<float> d4;
  auto total = hn::Load(d4, buf);
  for (size_t block = 1; block < hn::Lanes(d) / 4; ++block) {
    total = hn::Add(total, hn::Load(d4, buf + 4 * block));
  }
  hn::StoreU(total, d4, out);
}

// G query vectors (q_h at q + h * n) against rows [j0, j0 + R) (R <= 4): acc[r][h] holds the
// lane-wise products of q_h and row j0 + r, each row loaded (and converted) once for the group.
template <class Rows, int G, int R>
HWY_INLINE void DotGroupRows(DF d, const float* q, const uint8_t* row0, size_t stride, int64_t n,
                             VF (&acc)[4][G]) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int r = 0; r < R; ++r) {
    for (int h = 0; h < G; ++h) acc[r][h] = hn::Zero(d);
  }
  for (int64_t i = 0; i < n; i += lanes) {
    const int64_t rem = n - i;
    const bool full = rem >= lanes;
    VF qv[G];
    for (int h = 0; h < G; ++h) {
      qv[h] = full ? hn::LoadU(d, q + h * n + i) : LoadTail(d, q + h * n + i, rem);
    }
    for (int r = 0; r < R; ++r) {
      const void* row = row0 + r * stride;
      const VF v = full ? Rows::Load(d, row, i) : Rows::LoadTail(d, row, i, rem);
      for (int h = 0; h < G; ++h) acc[r][h] = hn::MulAdd(qv[h], v, acc[r][h]);
    }
  }
}

// DotRowsFn for a group of G <= 4 heads: rows in fours sharing one reduction per head.
template <class Rows, int G>
void DotRowsGroup(const float* q, const void* rows, size_t stride, int64_t n_rows, int64_t n,
                  float* out, int64_t out_stride) {
  const DF d;
  const auto* base = static_cast<const uint8_t*>(rows);
  VF acc[4][G];
  int64_t j = 0;
  for (; j + 4 <= n_rows; j += 4) {
    DotGroupRows<Rows, G, 4>(d, q, base + j * stride, stride, n, acc);
    for (int h = 0; h < G; ++h) {
      SumsOf4(d, acc[0][h], acc[1][h], acc[2][h], acc[3][h], out + h * out_stride + j);
    }
  }
  for (; j < n_rows; ++j) {
    DotGroupRows<Rows, G, 1>(d, q, base + j * stride, stride, n, acc);
    for (int h = 0; h < G; ++h) {
      out[h * out_stride + j] = hn::GetLane(hn::SumOfLanes(d, acc[0][h]));
    }
  }
}

// Heads in groups of up to four (registers: 4 rows x 4 heads of accumulators).
template <class Rows>
void DotRows(const float* q, int64_t g, const void* rows, size_t stride, int64_t n_rows,
             int64_t n, float* out, int64_t out_stride) {
  for (int64_t h0 = 0; h0 < g; h0 += 4) {
    const float* qh = q + h0 * n;
    float* o = out + h0 * out_stride;
    switch (std::min<int64_t>(4, g - h0)) {
      case 1: DotRowsGroup<Rows, 1>(qh, rows, stride, n_rows, n, o, out_stride); break;
      case 2: DotRowsGroup<Rows, 2>(qh, rows, stride, n_rows, n, o, out_stride); break;
      case 3: DotRowsGroup<Rows, 3>(qh, rows, stride, n_rows, n, o, out_stride); break;
      default: DotRowsGroup<Rows, 4>(qh, rows, stride, n_rows, n, o, out_stride); break;
    }
  }
}

// AxpyRowsFn for a group of G <= 4 heads: column blocks of up to 4 vectors per head stay in
// registers while all rows stream past, each row loaded (and converted) once for the group.
template <class Rows, int G>
void AxpyRowsGroup(const float* w, int64_t w_stride, const void* rows, size_t stride,
                   int64_t n_rows, int64_t n, float* acc) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto* base = static_cast<const uint8_t*>(rows);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    VF a[G][4];
    for (int h = 0; h < G; ++h) {
      for (int c = 0; c < 4; ++c) a[h][c] = hn::LoadU(d, acc + h * n + i + c * lanes);
    }
    for (int64_t j = 0; j < n_rows; ++j) {
      const void* row = base + j * stride;
      VF r[4];
      for (int c = 0; c < 4; ++c) r[c] = Rows::Load(d, row, i + c * lanes);
      for (int h = 0; h < G; ++h) {
        const VF wj = hn::Set(d, w[h * w_stride + j]);
        for (int c = 0; c < 4; ++c) a[h][c] = hn::MulAdd(wj, r[c], a[h][c]);
      }
    }
    for (int h = 0; h < G; ++h) {
      for (int c = 0; c < 4; ++c) hn::StoreU(a[h][c], d, acc + h * n + i + c * lanes);
    }
  }
  for (; i < n; i += lanes) {
    const int64_t rem = n - i;
    const bool full = rem >= lanes;
    VF a[G];
    for (int h = 0; h < G; ++h) {
      a[h] = full ? hn::LoadU(d, acc + h * n + i) : LoadTail(d, acc + h * n + i, rem);
    }
    for (int64_t j = 0; j < n_rows; ++j) {
      const void* row = base + j * stride;
      const VF r = full ? Rows::Load(d, row, i) : Rows::LoadTail(d, row, i, rem);
      for (int h = 0; h < G; ++h) a[h] = hn::MulAdd(hn::Set(d, w[h * w_stride + j]), r, a[h]);
    }
    for (int h = 0; h < G; ++h) {
      if (full) {
        hn::StoreU(a[h], d, acc + h * n + i);
      } else {
        StoreTail(a[h], d, acc + h * n + i, rem);
      }
    }
  }
}

template <class Rows>
void AxpyRows(const float* w, int64_t w_stride, int64_t g, const void* rows, size_t stride,
              int64_t n_rows, int64_t n, float* acc) {
  for (int64_t h0 = 0; h0 < g; h0 += 4) {
    const float* wh = w + h0 * w_stride;
    float* ah = acc + h0 * n;
    switch (std::min<int64_t>(4, g - h0)) {
      case 1: AxpyRowsGroup<Rows, 1>(wh, w_stride, rows, stride, n_rows, n, ah); break;
      case 2: AxpyRowsGroup<Rows, 2>(wh, w_stride, rows, stride, n_rows, n, ah); break;
      case 3: AxpyRowsGroup<Rows, 3>(wh, w_stride, rows, stride, n_rows, n, ah); break;
      default: AxpyRowsGroup<Rows, 4>(wh, w_stride, rows, stride, n_rows, n, ah); break;
    }
  }
}

void DotRowsF32(const float* q, int64_t g, const void* rows, size_t stride, int64_t n_rows,
                int64_t n, float* out, int64_t out_stride) {
  DotRows<F32Rows>(q, g, rows, stride, n_rows, n, out, out_stride);
}
void DotRowsF16(const float* q, int64_t g, const void* rows, size_t stride, int64_t n_rows,
                int64_t n, float* out, int64_t out_stride) {
  DotRows<F16Rows>(q, g, rows, stride, n_rows, n, out, out_stride);
}
void AxpyRowsF32(const float* w, int64_t w_stride, int64_t g, const void* rows, size_t stride,
                 int64_t n_rows, int64_t n, float* acc) {
  AxpyRows<F32Rows>(w, w_stride, g, rows, stride, n_rows, n, acc);
}
void AxpyRowsF16(const float* w, int64_t w_stride, int64_t g, const void* rows, size_t stride,
                 int64_t n_rows, int64_t n, float* acc) {
  AxpyRows<F16Rows>(w, w_stride, g, rows, stride, n_rows, n, acc);
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_NEON
}  // namespace HWY_NAMESPACE
}  // namespace vlmd::engine::kernels
HWY_AFTER_NAMESPACE();

// The fillers sit outside HWY_BEFORE_NAMESPACE, so they are compiled for the baseline ISA and may
// run (to build a table) on a CPU without the target.
#if HWY_TARGET == HWY_AVX2
#define VLMD_HWY_OPS_FILLER FillHwyOpsAvx2
#elif HWY_TARGET == HWY_AVX3
#define VLMD_HWY_OPS_FILLER FillHwyOpsAvx512
#elif HWY_TARGET == HWY_NEON
#define VLMD_HWY_OPS_FILLER FillHwyOpsNeon
#endif

#ifdef VLMD_HWY_OPS_FILLER
namespace vlmd::engine::kernels {

void VLMD_HWY_OPS_FILLER(KernelTable* t) {
  namespace target = HWY_NAMESPACE;
  t->rms_norm = target::RmsNorm;
  t->layer_norm = target::LayerNorm;
  t->softmax = target::Softmax;
  t->gelu_tanh = target::GeluTanh;
  t->gelu_erf = target::GeluErf;
  t->gelu_quick = target::GeluQuick;
  t->silu = target::Silu;
  t->round_f16 = target::RoundF16;
  t->swiglu = target::SwiGlu;
  t->rope = target::Rope;
  t->exp_sub_sum = target::ExpSubSum;
  t->dot_rows_f32 = target::DotRowsF32;
  t->dot_rows_f16 = target::DotRowsF16;
  t->axpy_rows_f32 = target::AxpyRowsF32;
  t->axpy_rows_f16 = target::AxpyRowsF16;
}

}  // namespace vlmd::engine::kernels
#undef VLMD_HWY_OPS_FILLER
#endif
