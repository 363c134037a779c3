// Scalar reference kernels (placeholder filler until the kernels land).
#include "engine/kernels/ref/ref_fill.h"

namespace vlmd::engine::kernels {

void FillRefMatmulKernels(KernelTable* t) { (void)t; }

}  // namespace vlmd::engine::kernels
