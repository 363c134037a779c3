// Fills the KernelTable slots implemented for AVX512-BF16 (see kernel_table.h): the bf16 row
// conversions with vcvtneps2bf16 and the attention on vdpbf16ps. Float matmuls keep the AVX-512
// FMA kernels: vdpbf16ps runs at half the fp32 FMA rate on Zen 4 (and slower on Sapphire Rapids).
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512Bf16Kernels(KernelTable* t) {
  FillAvx512Bf16Rows(t);
  FillAvx512Bf16Attention(t);
}

}  // namespace vlmd::engine::kernels
