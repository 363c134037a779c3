// AVX512-VNNI instantiation of the 32-element-block integer matmul tiles (quant_matmul_inl.h):
// the byte dot is one vpdpbusd and the tiles use the 32 vector registers of AVX-512VL.
#define VLMD_X86_NS avx512vnni
#include "engine/kernels/x86/quant_matmul_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512VnniQuantMatmul(KernelTable* t) { avx512vnni::FillQuant32Matmul(t); }

}  // namespace vlmd::engine::kernels
