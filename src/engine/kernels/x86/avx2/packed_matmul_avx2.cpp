// The packed int8 matmul of the AVX2 table (and the plain AVX-512 one, which inherits it):
// x86/packed_matmul_avx2_inl.h with vpmaddubsw + vpmaddwd products.
#include "engine/kernels/x86/packed_matmul_avx2_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {

void FillAvx2PackedMatmul(KernelTable* t) { t->packed_matmul = &packed_avx2::PackedMatmulDispatch; }

}  // namespace vlmd::engine::kernels
