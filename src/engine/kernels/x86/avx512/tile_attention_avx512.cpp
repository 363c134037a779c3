// Flash-style attention of one head (tile_bf16.h, TileAttentionArgs) with AVX-512 FMAs, for CPUs
// without AVX512-BF16 (Skylake-SP, Cascade Lake, Ice Lake): the driver and online softmax of
// flash_attention_inl.h and the FMA products of flash_pair_fma_avx512_inl.h.
// It is also faster than vdpbf16ps where that issues once per ~2.5 cycles against two FMAs per
// cycle (a Sapphire Rapids guest forced off AMX, bench/RESULTS.md session 21); the avx512bf16
// table (Zen 4/5, where vdpbf16ps doubles the FMA rate, and Cooper Lake, not measured) keeps it.

#include "engine/kernels/x86/flash_pair_fma_avx512_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace {

void TileAttentionAvx512(const TileAttentionArgs& a) {
  flash::FlashAttention<pair_fma_avx512::Score, pair_fma_avx512::Accumulate, flash::Avx512Rows>(a);
}

}  // namespace

void FillAvx512Attention(KernelTable* t) { t->tile_attention = TileAttentionAvx512; }

}  // namespace vlmd::engine::kernels
