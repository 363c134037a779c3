// The bf16 row kernels (x86/bf16_rows_inl.h) for AVX-512 CPUs without AVX512-BF16 (Skylake-SP,
// Cascade Lake, Ice Lake): the same results as the scalar reference, in integer steps.

#include "engine/kernels/x86/bf16_rows_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512Bf16RowsInteger(KernelTable* t) { bf16_rows::Fill(t); }

}  // namespace vlmd::engine::kernels
