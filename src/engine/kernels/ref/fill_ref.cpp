// Fills the scalar reference table: every slot of every table starts from these.
#include "engine/kernels/ref/ref_fill.h"

namespace vlmd::engine::kernels {

void FillRefKernels(KernelTable* t) {
  FillRefMatmulKernels(t);
  FillRefOpKernels(t);
}

}  // namespace vlmd::engine::kernels
