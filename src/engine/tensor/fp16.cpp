// Row conversions between f32 and F16/BF16 (scalar; SIMD kernels have their own).
#include "engine/tensor/fp16.h"

namespace vlmd::engine {

// F16ToF32's steps with selects instead of branches, so that the compiler vectorizes the loop
// (the same bits for every pattern, NaN payloads included: a test). The scalar loop was 18% of
// a Qwen2.5-VL-3B load (its F16 vision matrices, converted before their Q8_0 packing).
void F16ToF32Row(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = x[i];
    const uint32_t bits = ((h & 0x7FFFu) << 13) + ((127u - 15u) << 23);
    const uint32_t exp = (h & 0x7C00u) << 13;
    const uint32_t inf_nan = bits + ((128u - 16u) << 23);
    const uint32_t subnormal = std::bit_cast<uint32_t>(
        std::bit_cast<float>(bits + (1u << 23)) - std::bit_cast<float>(113u << 23));
    // All-ones / zero masks, not branches: GCC does not if-convert a float subtraction under
    // its default -ftrapping-math.
    const uint32_t is_inf_nan = 0u - static_cast<uint32_t>(exp == 0x0F800000u);
    const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exp == 0);
    const uint32_t magnitude = (inf_nan & is_inf_nan) | (subnormal & is_subnormal) |
                               (bits & ~(is_inf_nan | is_subnormal));
    y[i] = std::bit_cast<float>(magnitude | ((h & 0x8000u) << 16));
  }
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
