// The fast precision's attention scores on int8 (vision encoders without AMX): Q K^T as integer
// dot products, which vpdpbusd runs at twice the rate of vdpbf16ps (four products per lane per
// instruction instead of two). P V stays on bf16 (tile_bf16.h, TileAttentionArgs).
//
// Quantization, symmetric, one scale per row (per query row and head, per key and kv head):
//  - a query row x (hd values) times `mul` (the softmax scale in log2 units): with
//    a = max |x mul|, scale = a / 127 and the bytes round(x mul * (127 / a)) + 128 (unsigned:
//    vpdpbusd multiplies unsigned by signed bytes); a row of zeros, or of values so small that
//    127 / a overflows, has scale 0 and bytes 128.
//  - the keys of one call and kv head are first smoothed (SageAttention): the mean key
//    (per channel, over the call's n keys) is subtracted. That shifts every score of a query by
//    the same q . mean, which the softmax cancels exactly, and centres channels that carry a
//    common offset, so that their int8 steps are finer. Then per key x: a = max |x|,
//    scale = a / 127, the int8 values round(x * (127 / a)), and the bias -128 * sum of them
//    (it cancels the queries' +128).
// The score of query i and key j is (sum_d qu_id k_jd + bias_j) * scale_j * scale_i, the
// integer sum exact in f32 (|sum| <= 127 * 255 * 512 < 2^24). Non-finite values give a scale
// of NaN (the score, and the attention's output row, are then NaN: ops::CheckFinite reports it).
// Rounding is to nearest even (the SIMD conversions' default), so the SIMD quantizers equal the
// references below bit for bit.
//
// Key panels: as the bf16 ones (16 keys each, the last zero-padded), in 4-byte steps along the
// head dimension: panel p, step w holds the 16 keys' bytes (4w .. 4w + 3), 64 bytes, i.e. one
// register that vpdpbusd multiplies by a query's 4 bytes broadcast. Scales and biases: one per
// key, the padding keys' 0.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace vlmd::engine::kernels {

inline int64_t KeyPanelsI8Keys(int64_t n) { return (n + 15) / 16 * 16; }
inline size_t KeyPanelsI8Bytes(int64_t n, int64_t hd_pad) {
  return static_cast<size_t>(KeyPanelsI8Keys(n)) * static_cast<size_t>(hd_pad);
}

// A row's scale and the factor its values are multiplied by before rounding, from its largest
// magnitude `amax` (`bad`: a value is non-finite): NaN and 0 for a bad row, 0 and 0 for a row of
// zeros or of values so small that 127 / amax overflows (their bytes are then all 0), else
// amax / 127 and 127 / amax. Shared by the reference and the SIMD quantizers.
inline void RowScaleI8(float amax, bool bad, float* scale, float* inv) {
  if (bad) {
    *scale = std::numeric_limits<float>::quiet_NaN();
    *inv = 0.0f;
  } else if (amax == 0.0f || !std::isfinite(127.0f / amax)) {
    *scale = *inv = 0.0f;
  } else {
    *scale = amax / 127.0f;
    *inv = 127.0f / amax;
  }
}

// rows query rows (row r at q + r * q_stride, hd values) to dst (row r at dst + r * hd_pad bytes,
// hd_pad >= hd a multiple of 4, bytes past hd 128) and scales[r].
using QuantizeQueriesI8Fn = void (*)(const float* q, int64_t q_stride, int64_t rows, int64_t hd,
                                     int64_t hd_pad, float mul, uint8_t* dst, float* scales);
// n >= 1 keys (row j at k + j * k_stride, hd values), smoothed, to KeyPanelsI8Bytes(n, hd_pad)
// bytes of panels and KeyPanelsI8Keys(n) scales and biases. mean: hd_pad floats of scratch.
using PackKeysI8Fn = void (*)(const float* k, int64_t k_stride, int64_t n, int64_t hd,
                              int64_t hd_pad, int8_t* panels, float* scales, int32_t* bias,
                              float* mean);

// Scalar references (the definition of the format; tests compare the SIMD ones to them).
void QuantizeQueriesI8Ref(const float* q, int64_t q_stride, int64_t rows, int64_t hd,
                          int64_t hd_pad, float mul, uint8_t* dst, float* scales);
void PackKeysI8Ref(const float* k, int64_t k_stride, int64_t n, int64_t hd, int64_t hd_pad,
                   int8_t* panels, float* scales, int32_t* bias, float* mean);

}  // namespace vlmd::engine::kernels
