// Per-target fillers of the Highway kernels (hwy/elementwise.cpp). They are plain functions
// compiled at the baseline ISA that only store pointers to target code, so calling one is safe on
// any CPU; running the kernels it installs needs the target's ISA.
#pragma once

#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::kernels {

void FillHwyOpsAvx2(KernelTable* t);    // Highway target HWY_AVX2 (AVX2 + FMA + F16C + BMI2)
void FillHwyOpsAvx512(KernelTable* t);  // Highway target HWY_AVX3 (AVX-512 F/VL/DQ/BW)
void FillHwyOpsNeon(KernelTable* t);    // Highway target HWY_NEON (aarch64 Advanced SIMD)

}  // namespace vlmd::engine::kernels
