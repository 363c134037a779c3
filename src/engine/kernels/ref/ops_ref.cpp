// Scalar reference kernels for the non-matmul slots: norms, softmax, activations, rope and the
// attention row primitives. They are the oracles the SIMD kernels are tested against, so they
// favour accuracy over speed: every reduction and every transcendental is evaluated in double and
// rounded once to f32.
//
// Definitions follow ggml-cpu (ggml/src/ggml-cpu/vec.h, ops.cpp at LC 3f545be): gelu is the tanh
// approximation, gelu_erf the exact form, gelu_quick x*sigmoid(1.702x), swiglu silu(a)*b.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/kernels/ref/ref_fill.h"
#include "engine/tensor/fp16.h"

namespace vlmd::engine::kernels {
namespace {

// IEEE binary16 -> binary32, exact (every half is representable as a float).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

void RmsNormRef(const float* x, const float* weight, float* y, int64_t n, float eps) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const double w = weight ? weight[i] : 1.0;
    y[i] = static_cast<float>(x[i] * scale * w);
  }
}

void LayerNormRef(const float* x, const float* weight, const float* bias, float* y, int64_t n,
                  float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const double w = weight ? weight[i] : 1.0;
    const double b = bias ? bias[i] : 0.0;
    y[i] = static_cast<float>((x[i] - mean) * rstd * w + b);
  }
}

float ExpSubSumRef(const float* x, float max, float* y, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = static_cast<float>(std::exp(static_cast<double>(x[i]) - max));
    y[i] = e;
    sum += e;
  }
  return static_cast<float>(sum);
}

void SoftmaxRef(float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  bool has_nan = false;
  for (int64_t i = 0; i < n; ++i) {
    max = x[i] > max ? x[i] : max;
    has_nan |= std::isnan(x[i]);
  }
  if (has_nan) {
    // NaN must survive to the E7 checks, also in a row that is otherwise masked.
    for (int64_t i = 0; i < n; ++i) x[i] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (max == -std::numeric_limits<float>::infinity()) {
    // Fully masked row: define it as all zeros rather than 0/0.
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - max) / sum);
  }
}

// x * sigmoid(k x) = x / (1 + exp(-k x)); this form has no cancellation for negative x.
double XSigmoid(double x, double k) { return x / (1.0 + std::exp(-k * x)); }

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCoefA = 0.044715;
constexpr double kGeluQuickCoef = 1.702;

// 0.5 x (1 + tanh(u)), evaluated as the identical x * sigmoid(2u): 1 + tanh(u) cancels for
// x << 0 even in double (at x = -6 it keeps only ~6 significant digits).
void GeluTanhRef(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = kSqrt2OverPi * v * (1.0 + kGeluCoefA * v * v);
    y[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * u)));
  }
}

void GeluErfRef(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    // 0.5 * erfc(-v / sqrt2) == 0.5 * (1 + erf(v / sqrt2)) without cancellation for v < 0.
    y[i] = static_cast<float>(v * 0.5 * std::erfc(-v * 0.70710678118654752440));
  }
}

void GeluQuickRef(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(XSigmoid(x[i], kGeluQuickCoef));
}

void SiluRef(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(XSigmoid(x[i], 1.0));
}

void SwiGluRef(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(XSigmoid(a[i], 1.0) * b[i]);
}

void RopeRef(float* x, int64_t n_heads, int64_t head_stride, const float* cos_sin, int64_t n_rot,
             bool neox) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_stride;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i0 = neox ? i : 2 * i;
      const int64_t i1 = neox ? i + half : 2 * i + 1;
      const double c = cos_sin[i], s = cos_sin[half + i];
      const double x0 = head[i0], x1 = head[i1];
      head[i0] = static_cast<float>(x0 * c - x1 * s);
      head[i1] = static_cast<float>(x0 * s + x1 * c);
    }
  }
}

template <typename Load>
void DotRowsImpl(const float* q, int64_t g, const void* rows, size_t row_stride_bytes,
                 int64_t n_rows, int64_t n, float* out, int64_t out_stride, Load load) {
  const auto* base = static_cast<const uint8_t*>(rows);
  for (int64_t h = 0; h < g; ++h) {
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* row = base + j * row_stride_bytes;
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(q[h * n + i]) * load(row, i);
      out[h * out_stride + j] = static_cast<float>(sum);
    }
  }
}

template <typename Load>
void AxpyRowsImpl(const float* w, int64_t w_stride, int64_t g, const void* rows,
                  size_t row_stride_bytes, int64_t n_rows, int64_t n, float* acc, Load load) {
  const auto* base = static_cast<const uint8_t*>(rows);
  for (int64_t h = 0; h < g; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      double sum = acc[h * n + i];
      for (int64_t j = 0; j < n_rows; ++j) {
        sum += static_cast<double>(w[h * w_stride + j]) * load(base + j * row_stride_bytes, i);
      }
      acc[h * n + i] = static_cast<float>(sum);
    }
  }
}

float LoadF32(const uint8_t* row, int64_t i) {
  float v;
  std::memcpy(&v, row + i * sizeof(float), sizeof(v));
  return v;
}

float LoadF16(const uint8_t* row, int64_t i) {
  uint16_t h;
  std::memcpy(&h, row + i * sizeof(uint16_t), sizeof(h));
  return HalfToFloat(h);
}

void DotRowsF32Ref(const float* q, int64_t g, const void* rows, size_t stride, int64_t n_rows,
                   int64_t n, float* out, int64_t out_stride) {
  DotRowsImpl(q, g, rows, stride, n_rows, n, out, out_stride, LoadF32);
}
void DotRowsF16Ref(const float* q, int64_t g, const void* rows, size_t stride, int64_t n_rows,
                   int64_t n, float* out, int64_t out_stride) {
  DotRowsImpl(q, g, rows, stride, n_rows, n, out, out_stride, LoadF16);
}
void AxpyRowsF32Ref(const float* w, int64_t w_stride, int64_t g, const void* rows, size_t stride,
                    int64_t n_rows, int64_t n, float* acc) {
  AxpyRowsImpl(w, w_stride, g, rows, stride, n_rows, n, acc, LoadF32);
}
void AxpyRowsF16Ref(const float* w, int64_t w_stride, int64_t g, const void* rows, size_t stride,
                    int64_t n_rows, int64_t n, float* acc) {
  AxpyRowsImpl(w, w_stride, g, rows, stride, n_rows, n, acc, LoadF16);
}

void RoundF16Ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = F16ToF32(F32ToF16(x[i]));
}

}  // namespace

void FillRefOpKernels(KernelTable* t) {
  t->rms_norm = RmsNormRef;
  t->layer_norm = LayerNormRef;
  t->softmax = SoftmaxRef;
  t->gelu_tanh = GeluTanhRef;
  t->gelu_erf = GeluErfRef;
  t->gelu_quick = GeluQuickRef;
  t->silu = SiluRef;
  t->round_f16 = RoundF16Ref;
  t->swiglu = SwiGluRef;
  t->rope = RopeRef;
  t->exp_sub_sum = ExpSubSumRef;
  t->dot_rows_f32 = DotRowsF32Ref;
  t->dot_rows_f16 = DotRowsF16Ref;
  t->axpy_rows_f32 = AxpyRowsF32Ref;
  t->axpy_rows_f16 = AxpyRowsF16Ref;
}

}  // namespace vlmd::engine::kernels
