// AVX2 F32 / F16 / BF16 matmul: register-tiled 256-bit FMA dot products (float_matmul_inl.h).
#define VLMD_X86_NS avx2
#include "engine/kernels/x86/float_matmul_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx2FloatMatmul(KernelTable* t) {
  t->matmul[static_cast<int>(DType::kF32)] = &avx2::FloatDotMatmul<avx2::F32Elem>;
  t->matmul[static_cast<int>(DType::kF16)] = &avx2::FloatDotMatmul<avx2::F16Elem>;
  t->matmul[static_cast<int>(DType::kBF16)] = &avx2::FloatDotMatmul<avx2::BF16Elem>;
  t->act_type[static_cast<int>(DType::kF32)] = DType::kF32;
  t->act_type[static_cast<int>(DType::kF16)] = DType::kF16;
  t->act_type[static_cast<int>(DType::kBF16)] = DType::kBF16;
}

}  // namespace vlmd::engine::kernels
