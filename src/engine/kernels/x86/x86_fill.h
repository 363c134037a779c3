// Fillers of the per-ISA kernel families; each lives in its own translation unit under
// x86/<isa>/ (compiled with that ISA's flags) and overwrites the KernelTable slots it implements.
#pragma once

#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::kernels {

void FillAvx2Converters(KernelTable* t);        // avx2/convert_act_avx2.cpp
void FillAvx2QuantMatmul(KernelTable* t);       // avx2/quant_matmul_avx2.cpp
void FillAvx2KQuantMatmul(KernelTable* t);      // avx2/kquant_matmul_avx2.cpp
void FillAvx2FloatMatmul(KernelTable* t);       // avx2/float_matmul_avx2.cpp
void FillAvx2PackedMatmul(KernelTable* t);      // avx2/packed_matmul_avx2.cpp
void FillAvx2Bf16Rows(KernelTable* t);          // avx2/bf16_rows_avx2.cpp
void FillAvx2Attention(KernelTable* t);         // avx2/tile_attention_avx2.cpp
void FillAvxVnniPackedMatmul(KernelTable* t);   // avxvnni/packed_matmul_avxvnni.cpp
void FillAvxVnniAttention(KernelTable* t);      // avxvnni/tile_attention_avxvnni.cpp
void FillAvx512FloatMatmul(KernelTable* t);     // avx512/float_matmul_avx512.cpp
void FillAvx512Converters(KernelTable* t);      // avx512/convert_act_avx512.cpp
void FillAvx512Bf16RowsInteger(KernelTable* t);  // avx512/bf16_rows_avx512.cpp
void FillAvx512Attention(KernelTable* t);       // avx512/tile_attention_avx512.cpp
void FillAvx512VnniQuantMatmul(KernelTable* t);   // avx512vnni/quant_matmul_vnni.cpp
void FillAvx512VnniKQuantMatmul(KernelTable* t);  // avx512vnni/kquant_matmul_vnni.cpp
void FillAvx512VnniPackedMatmul(KernelTable* t);  // avx512vnni/packed_matmul_vnni.cpp
void FillAvx512VnniAttention(KernelTable* t);     // avx512vnni/tile_attention_vnni.cpp
void FillAvx512Bf16Rows(KernelTable* t);          // avx512bf16/bf16_rows_avx512bf16.cpp
void FillAvx512Bf16Attention(KernelTable* t);     // avx512bf16/tile_attention_avx512bf16.cpp
void FillAmxPackedToTiles(KernelTable* t);        // amx/packed_to_tiles_amx.cpp

}  // namespace vlmd::engine::kernels
