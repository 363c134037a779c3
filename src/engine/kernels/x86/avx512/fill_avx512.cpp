// Fills the KernelTable slots implemented for AVX-512 F/BW/VL/DQ (see kernel_table.h). Integer
// matmuls without VNNI keep the AVX2 tiles; the float matmuls get 512-bit kernels; the bf16 rows
// (rounded in integer steps) and an FMA flash attention give the vision encoder and prompts the
// bf16 attention of the AVX512-BF16 and AMX tables.
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512Kernels(KernelTable* t) {
  FillAvx512Converters(t);
  FillAvx512FloatMatmul(t);
  FillAvx512Bf16RowsInteger(t);
  FillAvx512Attention(t);
}

}  // namespace vlmd::engine::kernels
