// Which weight type a matrix gets when a requested type does not fit its rows, and how GGUF
// names the resulting file type. Shared by vlmd-quantize and vlmd-synth.
#pragma once

#include <cstdint>

#include "engine/tensor/dtype.h"

namespace vlmd::engine {

// Weight type for a matrix whose rows have `row_len` values: `wanted` when the row is a multiple
// of its block, else the fallback llama-quantize uses (Q4_K/Q5_K -> Q5_0, Q6_K -> Q8_0, other
// block types -> F16; F32 if even that does not fit). `*fell_back` says whether it changed.
DType TypeForRowLength(DType wanted, int64_t row_len, bool* fell_back);

// ggml's general.file_type number (llama_ftype) for a model whose matrices are `type`, e.g.
// Q4_0 -> 2, Q4_K -> 15 (Q4_K_M). 0 (all F32) for types without a file-type name.
uint32_t GgufFileType(DType type);

}  // namespace vlmd::engine
