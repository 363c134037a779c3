// AVX512-VNNI instantiation of the k-quant integer matmul tiles (kquant_matmul_inl.h).
#define VLMD_X86_NS avx512vnni
#include "engine/kernels/x86/kquant_matmul_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512VnniKQuantMatmul(KernelTable* t) { avx512vnni::FillKQuantMatmul(t); }

}  // namespace vlmd::engine::kernels
