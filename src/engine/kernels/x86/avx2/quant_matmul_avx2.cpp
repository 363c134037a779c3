// AVX2 instantiation of the 32-element-block integer matmul tiles (quant_matmul_inl.h).
#define VLMD_X86_NS avx2
#include "engine/kernels/x86/quant_matmul_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx2QuantMatmul(KernelTable* t) { avx2::FillQuant32Matmul(t); }

}  // namespace vlmd::engine::kernels
