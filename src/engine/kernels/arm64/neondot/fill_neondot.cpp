// The neondot table (aarch64 with the int8 dot product): the Highway NEON kernels (filled before
// this) plus the packed int8 matmul on SDOT.
#include "engine/kernels/arm64/arm64_fill.h"

namespace vlmd::engine::kernels {

void FillNeonDotKernels(KernelTable* t) { FillNeonDotPackedMatmul(t); }

}  // namespace vlmd::engine::kernels
