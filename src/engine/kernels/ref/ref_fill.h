// Fillers of the scalar reference table, one per kernel family (kept in separate files).
#pragma once

#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::kernels {

void FillRefMatmulKernels(KernelTable* t);  // ref/matmul_ref.cpp
void FillRefOpKernels(KernelTable* t);      // ref/ops_ref.cpp

}  // namespace vlmd::engine::kernels
