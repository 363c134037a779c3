// The neondot table (aarch64 with the int8 dot product): the neon table's kernels (filled before
// this) with the packed int8 matmul on SDOT instead.
#include "engine/kernels/arm64/arm64_fill.h"

namespace vlmd::engine::kernels {

void FillNeonDotKernels(KernelTable* t) { FillNeonDotPackedMatmul(t); }

}  // namespace vlmd::engine::kernels
