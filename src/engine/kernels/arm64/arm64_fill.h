// Fillers of the aarch64 kernel families; each lives in its own translation unit under
// arm64/<isa>/ (compiled with that ISA's flags) and overwrites the KernelTable slots it implements.
#pragma once

#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::kernels {

void FillNeonPackedMatmul(KernelTable* t);     // neon/packed_matmul_neon.cpp
void FillNeonDotPackedMatmul(KernelTable* t);  // neondot/packed_matmul_neondot.cpp
void FillNeonI8mmPackedMatmul(KernelTable* t);  // neoni8mm/packed_matmul_i8mm.cpp
// The fast precision's bf16 flash attention and its row conversions (neon/tile_attention_neon.cpp).
void FillNeonAttention(KernelTable* t);

}  // namespace vlmd::engine::kernels
