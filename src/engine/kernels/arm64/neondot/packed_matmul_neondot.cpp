// The packed int8 matmul on the signed dot product SDOT (FEAT_DotProd: Neoverse N1 and later,
// Graviton 2+, Ampere Altra, Apple M1+): one vdotq_laneq_s32 per k-quad of 4 columns.
#include <arm_neon.h>

#include "engine/kernels/arm64/arm64_fill.h"
#include "engine/kernels/arm64/packed_matmul_arm64_inl.h"

namespace vlmd::engine::kernels {

void FillNeonDotPackedMatmul(KernelTable* t) { t->packed_matmul = &PackedMatmulFor<SdotQuads>; }

}  // namespace vlmd::engine::kernels
