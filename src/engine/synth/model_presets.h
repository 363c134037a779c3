// Shapes of the random-weight models vlmd generates for tests, benchmarks and the demo: a text
// decoder (llama family, as llama.cpp names it in GGUF) plus an optional vision tower (mmproj).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vlmd::engine::synth {

struct TextShape {
  int32_t n_layers = 2;
  int32_t d_model = 64;        // llama.embedding_length
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t d_ff = 256;          // llama.feed_forward_length
  int32_t n_ctx = 2048;        // llama.context_length
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = true;     // no output.weight: token_embd is the head (SmolLM2)
  int32_t n_vocab_base = 4096; // BPE vocabulary before the family's added tokens
};

enum class ProjectorKind { kNone, kMlp /* LLaVA */, kIdefics3 /* SmolVLM */ };

struct VisionShape {
  ProjectorKind projector = ProjectorKind::kNone;
  int32_t image_size = 64;     // encoder input (tile) side
  int32_t patch_size = 8;
  int32_t n_layers = 2;
  int32_t d_model = 96;        // clip.vision.embedding_length
  int32_t n_heads = 3;
  int32_t d_ff = 192;
  int32_t scale_factor = 2;    // idefics3 pixel shuffle
  int32_t preproc_image_size = 128;  // idefics3: longest edge after resize
  float ln_eps = 1e-6f;
};

struct ModelPreset {
  std::string name;
  std::string description;
  TextShape text;
  VisionShape vision;
};

// Presets: "tiny" (test-sized SmolVLM-like), "demo" (the `make run` model), "smolvlm-256m"
// (SmolLM2-135M text + SigLIP-B/16 at 512, the benchmark shape), "smollm2-135m" (text only),
// "smolvlm-2b" (SmolLM2-1.7B-class text + SigLIP-so400m-class vision).
std::optional<ModelPreset> FindPreset(std::string_view name);
std::vector<std::string> PresetNames();

}  // namespace vlmd::engine::synth
