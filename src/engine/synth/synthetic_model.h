// Writes random-weight VLMs (text GGUF + mmproj GGUF) with llama.cpp's key and tensor names, so
// that vlmd and llama.cpp load them as ordinary models. Used by vlmd-synth (benchmarks, the demo
// model) and by tests that need a model of a given shape.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/synth/model_presets.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::synth {

struct SynthOptions {
  DType text_type = DType::kF16;    // 2-D text weights; norms stay F32
  DType vision_type = DType::kF16;  // 2-D vision matrices; patch kernel, biases, norms stay F32
  uint64_t seed = 1;
};

// Weight type for a matrix whose rows have `row_len` values: `wanted` when the row is a multiple
// of its block, else the fallback llama-quantize uses (k-quants -> Q5_0 / Q8_0, 32-blocks -> F16).
// `*fell_back` says whether it changed.
DType TypeForRowLength(DType wanted, int64_t row_len, bool* fell_back);

// ggml's general.file_type number for a model whose matrices are `type` (e.g. Q4_0 -> 2).
uint32_t GgufFileType(DType type);

// Writes the text model / the mmproj of `preset` to `path` (atomically: temp file + rename).
// INVALID_ARGUMENT when the preset has no vision tower (mmproj) or a type is not quantizable;
// UNAVAILABLE on I/O errors.
Status WriteSyntheticText(const ModelPreset& preset, const SynthOptions& opts,
                          const std::string& path);
Status WriteSyntheticMmproj(const ModelPreset& preset, const SynthOptions& opts,
                            const std::string& path);

}  // namespace vlmd::engine::synth
