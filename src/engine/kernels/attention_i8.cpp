// Scalar references of the int8 attention operands (attention_i8.h).
#include "engine/kernels/attention_i8.h"

#include <algorithm>
#include <cmath>

namespace vlmd::engine::kernels {
namespace {

int32_t RoundToInt(float x) { return static_cast<int32_t>(std::nearbyint(x)); }

}  // namespace

void QuantizeQueriesI8Ref(const float* q, int64_t q_stride, int64_t rows, int64_t hd,
                          int64_t hd_pad, float mul, uint8_t* dst, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = q + r * q_stride;
    float amax = 0.0f;
    bool bad = false;
    for (int64_t d = 0; d < hd; ++d) {
      const float v = x[d] * mul;
      bad |= !std::isfinite(v);
      amax = std::max(amax, std::fabs(v));
    }
    float inv;
    RowScaleI8(amax, bad, &scales[r], &inv);
    uint8_t* out = dst + r * hd_pad;
    for (int64_t d = 0; d < hd_pad; ++d) {
      const int32_t v = d < hd && !bad ? RoundToInt(x[d] * mul * inv) : 0;
      out[d] = static_cast<uint8_t>(v + 128);
    }
  }
}

void PackKeysI8Ref(const float* k, int64_t k_stride, int64_t n, int64_t hd, int64_t hd_pad,
                   int8_t* panels, float* scales, int32_t* bias, float* mean) {
  std::fill(mean, mean + hd_pad, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < hd; ++d) mean[d] += k[j * k_stride + d];
  }
  const auto count = static_cast<float>(n);
  for (int64_t d = 0; d < hd; ++d) mean[d] /= count;
  const int64_t keys = KeyPanelsI8Keys(n);
  std::fill(panels, panels + KeyPanelsI8Bytes(n, hd_pad), int8_t{0});
  for (int64_t j = 0; j < keys; ++j) {
    if (j >= n) {
      scales[j] = 0.0f;
      bias[j] = 0;
      continue;
    }
    const float* x = k + j * k_stride;
    float amax = 0.0f;
    bool bad = false;
    for (int64_t d = 0; d < hd; ++d) {
      const float v = x[d] - mean[d];
      bad |= !std::isfinite(v);
      amax = std::max(amax, std::fabs(v));
    }
    float inv;
    RowScaleI8(amax, bad, &scales[j], &inv);
    int32_t sum = 0;
    int8_t* panel = panels + (j / 16) * 16 * hd_pad;
    for (int64_t d = 0; d < hd; ++d) {
      const int32_t v = bad ? 0 : RoundToInt((x[d] - mean[d]) * inv);
      panel[(d / 4) * 64 + (j % 16) * 4 + d % 4] = static_cast<int8_t>(v);
      sum += v;
    }
    bias[j] = -128 * sum;
  }
}

}  // namespace vlmd::engine::kernels
