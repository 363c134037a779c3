// Fills the KernelTable slots implemented for AVX2 + FMA + F16C (see kernel_table.h).
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx2Kernels(KernelTable* t) {
  FillAvx2Converters(t);
  FillAvx2QuantMatmul(t);
  FillAvx2KQuantMatmul(t);
  FillAvx2FloatMatmul(t);
  FillAvx2PackedMatmul(t);
  FillAvx2Bf16Rows(t);
  FillAvx2Attention(t);
}

}  // namespace vlmd::engine::kernels
