// Fills the KernelTable slots implemented for AVX512-VNNI (see kernel_table.h): the integer
// matmuls on vpdpbusd, and the encoders' attention with its scores on int8. Float matmuls keep
// the AVX-512 FMA kernels.
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512VnniKernels(KernelTable* t) {
  FillAvx512VnniQuantMatmul(t);
  FillAvx512VnniKQuantMatmul(t);
  FillAvx512VnniPackedMatmul(t);
  FillAvx512VnniAttention(t);
}

}  // namespace vlmd::engine::kernels
