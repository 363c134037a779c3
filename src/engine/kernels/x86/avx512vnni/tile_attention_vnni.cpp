// The encoders' attention with its scores on int8 (attention_i8.h) for AVX512-VNNI without
// AVX512-BF16 (Cascade Lake, Ice Lake): Q K^T on vpdpbusd (64 products per instruction, four
// times an FMA's 16), P V on the FMA products of the bf16 attention (flash_pair_fma_avx512_inl.h).
#include "engine/kernels/x86/attention_i8_avx512_inl.h"
#include "engine/kernels/x86/flash_pair_fma_avx512_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace {

void TileAttentionVnniI8(const TileAttentionArgs& a) {
  flash::FlashAttention<attention_i8::Score, pair_fma_avx512::Accumulate, flash::Avx512Rows>(a);
}

}  // namespace

void FillAvx512VnniAttention(KernelTable* t) {
  t->tile_attention_i8 = TileAttentionVnniI8;
  t->quantize_queries_i8 = attention_i8::QuantizeQueries;
  t->pack_keys_i8 = attention_i8::PackKeys;
}

}  // namespace vlmd::engine::kernels
