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
  // Outlier channels, as trained LLMs have (a few input channels of each matrix with activations
  // far larger than the rest; what calibrated quantization is for): > 0 scales the attn_norm and
  // ffn_norm weights of this many channels (the same in every layer) and as many rows of each
  // ffn_up (the inputs of ffn_down) by outlier_scale. 0: a plain random model.
  int32_t outlier_channels = 0;
  float outlier_scale = 16.0f;
};

// Writes the text model / the mmproj of `preset` to `path` (atomically: temp file + rename).
// INVALID_ARGUMENT when the preset has no vision tower (mmproj) or a type is not quantizable;
// UNAVAILABLE on I/O errors.
Status WriteSyntheticText(const ModelPreset& preset, const SynthOptions& opts,
                          const std::string& path);
Status WriteSyntheticMmproj(const ModelPreset& preset, const SynthOptions& opts,
                            const std::string& path);

}  // namespace vlmd::engine::synth
