// Fills the KernelTable slots implemented for AVX512-VNNI/BF16 (see kernel_table.h). Float
// matmuls keep the AVX-512 FMA kernels: vdpbf16ps runs at half the fp32 FMA rate here.
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512VnniKernels(KernelTable* t) {
  FillAvx512VnniQuantMatmul(t);
  FillAvx512VnniKQuantMatmul(t);
  FillAvx512VnniPackedMatmul(t);
  FillAvx512Bf16Rows(t);
  FillAvx512Bf16Attention(t);
}

}  // namespace vlmd::engine::kernels
