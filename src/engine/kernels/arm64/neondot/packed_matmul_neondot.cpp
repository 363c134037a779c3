// The packed int8 matmul on the signed dot product SDOT (FEAT_DotProd: Neoverse N1 and later,
// Graviton 2+, Ampere Altra, Apple M1+): one vdotq_laneq_s32 per k-quad of 4 columns.
#include <arm_neon.h>

#include "engine/kernels/arm64/arm64_fill.h"
#include "engine/kernels/arm64/packed_matmul_arm64_inl.h"

namespace vlmd::engine::kernels {
namespace {

struct SdotQuads {
  template <int kLane0, int kLane1>
  static int32x4_t TwoQuads(int32x4_t acc, int8x16_t w0, int8x16_t w1, int8x16_t a) {
    return vdotq_laneq_s32(vdotq_laneq_s32(acc, w0, a, kLane0), w1, a, kLane1);
  }
};

}  // namespace

void FillNeonDotPackedMatmul(KernelTable* t) { t->packed_matmul = &PackedMatmulFor<SdotQuads>; }

}  // namespace vlmd::engine::kernels
