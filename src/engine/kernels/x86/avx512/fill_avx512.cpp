// Fills the KernelTable slots implemented for AVX-512 F/BW/VL/DQ (see kernel_table.h). Integer
// matmuls without VNNI keep the AVX2 tiles; the float matmuls get 512-bit kernels.
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512Kernels(KernelTable* t) { FillAvx512FloatMatmul(t); }

}  // namespace vlmd::engine::kernels
