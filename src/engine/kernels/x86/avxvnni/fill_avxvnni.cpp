// Fills the KernelTable slots implemented for AVX-VNNI (see kernel_table.h): on top of the AVX2
// table, the packed int8 matmul's products and the encoders' attention scores on the 256-bit
// vpdpbusd. The GGUF-row-layout quant matmuls (used only for formats without a packed layout)
// keep the AVX2 ones.
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvxVnniKernels(KernelTable* t) {
  FillAvxVnniPackedMatmul(t);
  FillAvxVnniAttention(t);
}

}  // namespace vlmd::engine::kernels
