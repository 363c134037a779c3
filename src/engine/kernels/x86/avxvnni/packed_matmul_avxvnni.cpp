// The packed int8 matmul of the AVX-VNNI table: x86/packed_matmul_avx2_inl.h with the VEX
// vpdpbusd (compiled with -mavxvnni, so __AVXVNNI__ selects it).
#include "engine/kernels/x86/packed_matmul_avx2_inl.h"
#include "engine/kernels/x86/x86_fill.h"

#if !defined(__AVXVNNI__)
#error "compile with -mavxvnni (cmake/VlmdKernels.cmake: VLMD_ISA_FLAGS_avxvnni)"
#endif

namespace vlmd::engine::kernels {

void FillAvxVnniPackedMatmul(KernelTable* t) {
  t->packed_matmul = &packed_avx2::PackedMatmulDispatch;
}

}  // namespace vlmd::engine::kernels
