// AVX2 instantiation of the k-quant integer matmul tiles (kquant_matmul_inl.h).
#define VLMD_X86_NS avx2
#include "engine/kernels/x86/kquant_matmul_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx2KQuantMatmul(KernelTable* t) { avx2::FillKQuantMatmul(t); }

}  // namespace vlmd::engine::kernels
