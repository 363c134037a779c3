// The encoders' attention with its scores on int8 (attention_i8.h) for AVX-VNNI without AVX-512
// (Alder Lake and later clients, Sierra Forest): Q K^T on the VEX vpdpbusd (32 products per
// instruction, four times an AVX2 FMA's 8), P V on the FMA products of the AVX2 bf16 attention
// (flash_pair_fma_avx2_inl.h), whose scores the avx2 table keeps.
#include "engine/kernels/x86/flash_rows_avx2_inl.h"
#include "engine/kernels/x86/attention_i8_avxvnni_inl.h"
#include "engine/kernels/x86/flash_pair_fma_avx2_inl.h"
#include "engine/kernels/x86/x86_fill.h"

#if !defined(__AVXVNNI__)
#error "compile with -mavxvnni (cmake/VlmdKernels.cmake: VLMD_ISA_FLAGS_avxvnni)"
#endif

namespace vlmd::engine::kernels {
namespace {

void TileAttentionAvxVnniI8(const TileAttentionArgs& a) {
  flash::FlashAttention<attention_i8_avx2::Score, pair_fma_avx2::Products::Accumulate,
                        flash::Avx2Rows>(a);
}

}  // namespace

void FillAvxVnniAttention(KernelTable* t) {
  t->tile_attention_i8 = TileAttentionAvxVnniI8;
  t->quantize_queries_i8 = attention_i8_avx2::QuantizeQueries;
  t->pack_keys_i8 = attention_i8_avx2::PackKeys;
}

}  // namespace vlmd::engine::kernels
