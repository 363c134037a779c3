// The neon table (every aarch64 CPU): the Highway NEON kernels (filled before this) plus the
// packed int8 matmul on widening multiplies and the bf16 flash attention on FMAs.
#include "engine/kernels/arm64/arm64_fill.h"

namespace vlmd::engine::kernels {

void FillNeonKernels(KernelTable* t) {
  FillNeonPackedMatmul(t);
  FillNeonAttention(t);
}

}  // namespace vlmd::engine::kernels
