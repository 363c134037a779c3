// Row conversions between f32 and F16/BF16 (scalar; SIMD kernels have their own).
#include "engine/tensor/fp16.h"

namespace vlmd::engine {

void F16ToF32Row(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = F16ToF32(x[i]);
}

void F32ToF16Row(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = F32ToF16(x[i]);
}

void BF16ToF32Row(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = BF16ToF32(x[i]);
}

void F32ToBF16Row(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = F32ToBF16(x[i]);
}

}  // namespace vlmd::engine
