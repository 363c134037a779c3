// Flash-style attention of one head (tile_bf16.h, TileAttentionArgs) with AVX2 FMAs, for CPUs
// without AVX-512 (Zen 2/3, Haswell to Alder Lake; the avxvnni table adds int8 scores to it): the
// driver of flash_attention_inl.h with its AVX2 row steps and the FMA products of
// flash_pair_fma_avx2_inl.h on the same bf16 operands as the AVX-512 kernels, so the results
// differ from theirs only in the order of the f32 sums, in terms below 2^-126 of a row's largest
// (0 here, denormals there) and, against the avx512bf16 and amx tables, in denormal
// probabilities (vcvtneps2bf16 reads them as 0).
// Before it, the f32 path ran the encoder's attention as two f32 GEMMs per head with the scores
// of a whole block of queries in memory (bench/RESULTS.md, session 23).

#include "engine/kernels/x86/flash_rows_avx2_inl.h"
#include "engine/kernels/x86/flash_pair_fma_avx2_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace {

void TileAttentionAvx2(const TileAttentionArgs& a) {
  using pair_fma_avx2::Products;
  flash::FlashAttention<Products::Score, Products::Accumulate, flash::Avx2Rows>(a);
}

}  // namespace

void FillAvx2Attention(KernelTable* t) { t->tile_attention = TileAttentionAvx2; }

}  // namespace vlmd::engine::kernels
