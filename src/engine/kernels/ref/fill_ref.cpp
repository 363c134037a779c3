// Fills the scalar reference table: every slot of every table starts from these.
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/ref/ref_fill.h"
#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels {

void FillRefKernels(KernelTable* t) {
  FillRefMatmulKernels(t);
  FillRefOpKernels(t);
  t->to_bf16 = ToBf16Ref;  // the x86 SIMD and the arm64 tables replace it
  t->convert_q8_0_sums = ConvertQ8_0SumsRef;  // the x86 tables replace it
}

}  // namespace vlmd::engine::kernels
