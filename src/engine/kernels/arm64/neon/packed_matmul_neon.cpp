// The packed int8 matmul on ARMv8.0 Advanced SIMD, for CPUs without the dot product (Cortex-A53,
// A72, A73: Raspberry Pi 3/4, Graviton 1). Two k-quads at a time: the products of both quads
// are summed in int16 by SMULL + SMLAL (|w| <= 128 and |a| <= 127, as Q8_0's rule d = amax / 127
// guarantees for the engine's activations, so a sum of two is at most 32512 and never wraps),
// then widened pairwise into int32 and the two halves of each column folded by ADDP.
#include <arm_neon.h>

#include "engine/kernels/arm64/arm64_fill.h"
#include "engine/kernels/arm64/packed_matmul_arm64_inl.h"

namespace vlmd::engine::kernels {
namespace {

struct WideningQuads {
  template <int kLane0, int kLane1>
  static int32x4_t TwoQuads(int32x4_t acc, int8x16_t w0, int8x16_t w1, int8x16_t a) {
    const int32x4_t a32 = vreinterpretq_s32_s8(a);
    const int8x16_t a0 = vreinterpretq_s8_s32(vdupq_laneq_s32(a32, kLane0));
    const int8x16_t a1 = vreinterpretq_s8_s32(vdupq_laneq_s32(a32, kLane1));
    // Columns 0-1 (bytes 0-7) and 2-3 (bytes 8-15), each lane the sum of two quads' products.
    const int16x8_t lo =
        vmlal_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(a0)), vget_low_s8(w1), vget_low_s8(a1));
    const int16x8_t hi = vmlal_high_s8(vmull_high_s8(w0, a0), w1, a1);
    // [c0 k01, c0 k23, c1 k01, c1 k23] and the same for c2, c3 -> [c0, c1, c2, c3].
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
  }
};

}  // namespace

void FillNeonPackedMatmul(KernelTable* t) { t->packed_matmul = &PackedMatmulFor<WideningQuads>; }

}  // namespace vlmd::engine::kernels
