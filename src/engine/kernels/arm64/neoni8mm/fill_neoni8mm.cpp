// The neoni8mm table (aarch64 with the int8 matrix multiply): the neondot table's kernels
// (filled before this) with the packed int8 matmul on SMMLA for two rows and more.
#include "engine/kernels/arm64/arm64_fill.h"

namespace vlmd::engine::kernels {

void FillNeonI8mmKernels(KernelTable* t) { FillNeonI8mmPackedMatmul(t); }

}  // namespace vlmd::engine::kernels
