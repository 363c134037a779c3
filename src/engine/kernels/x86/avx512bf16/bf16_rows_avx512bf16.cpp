// The bf16 row kernels (x86/bf16_rows_inl.h) with AVX512-BF16's rounding instruction.

#include "engine/kernels/x86/bf16_rows_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx512Bf16Rows(KernelTable* t) { bf16_rows::Fill(t); }

}  // namespace vlmd::engine::kernels
