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

// Writes the text model / the mmproj of `preset` to `path` (atomically: temp file + rename).
// INVALID_ARGUMENT when the preset has no vision tower (mmproj) or a type is not quantizable;
// UNAVAILABLE on I/O errors.
Status WriteSyntheticText(const ModelPreset& preset, const SynthOptions& opts,
                          const std::string& path);
Status WriteSyntheticMmproj(const ModelPreset& preset, const SynthOptions& opts,
                            const std::string& path);

}  // namespace vlmd::engine::synth
