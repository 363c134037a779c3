// Fills the scalar reference table: every slot of every table starts from these.
#include "engine/kernels/ref/ref_fill.h"
#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels {

void FillRefKernels(KernelTable* t) {
  FillRefMatmulKernels(t);
  FillRefOpKernels(t);
  t->to_bf16 = ToBf16Ref;  // the AVX-512 tables replace it with SIMD conversions
}

}  // namespace vlmd::engine::kernels
