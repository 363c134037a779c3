// Hyperparameters of a CLIP-family vision encoder + projector ("mmproj" GGUF, general.architecture
// = clip), read once from the clip.* keys llama.cpp writes.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/ops/activation.h"

namespace vlmd::engine::models {

enum class ProjectorType : uint8_t {
  kMlp,       // LLaVA: mm.0 -> GELU -> mm.2 (class token dropped)
  kIdefics3,  // SmolVLM / Idefics3: pixel shuffle by scale_factor, then mm.model.fc
};

struct VisionConfig {
  ProjectorType projector = ProjectorType::kMlp;
  std::string projector_name;  // clip.projector_type as written ("mlp", "idefics3")
  int32_t image_size = 0;      // encoder input side, pixels (clip.vision.image_size)
  int32_t patch_size = 0;      // pixels
  int32_t d_model = 0;         // clip.vision.embedding_length
  int32_t d_ff = 0;
  int32_t n_layers = 0;        // blocks stored in the file
  int32_t n_heads = 0;
  int32_t head_dim = 0;        // d_model / n_heads
  int32_t projection_dim = 0;  // width of the projector output = text model d_model
  float eps = 1e-6f;           // LayerNorm epsilon
  std::array<float, 3> image_mean{};
  std::array<float, 3> image_std{};
  // FFN activation: clip.use_gelu -> GELU (tanh form, ggml_gelu); otherwise quick GELU, as
  // llama.cpp decides (clip.use_silu is not supported).
  ops::Activation ffn_act = ops::Activation::kGeluQuick;
  int32_t scale_factor = 1;        // idefics3 pixel-shuffle factor per side
  int32_t preproc_image_size = 0;  // idefics3: longest edge before tiling (0: image_size)

  int32_t patches_per_side() const { return image_size / patch_size; }
  int32_t n_patches() const { return patches_per_side() * patches_per_side(); }
};

// Reads and validates the config. UNIMPLEMENTED for a projector type other than mlp / idefics3 or
// a file without a vision encoder; NOT_FOUND / INVALID_ARGUMENT naming the key for missing or
// inconsistent values (e.g. image_size not a multiple of patch_size).
Result<VisionConfig> ReadVisionConfig(const gguf::GgufFile& file);

}  // namespace vlmd::engine::models
