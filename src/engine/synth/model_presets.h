// Shapes of the random-weight models vlmd generates for tests, benchmarks and the demo: a text
// decoder (llama family, as llama.cpp names it in GGUF) plus an optional vision tower (mmproj).
#pragma once

#include <array>
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
  // general.architecture: "llama", "qwen2" (q/k/v biases), "qwen2vl" (q/k/v biases, M-RoPE),
  // "qwen3vl" (q/k norms, interleaved M-RoPE, deepstack; the VL ones need rope_sections, summing
  // to head_dim / 2), "qwen3vlmoe" (qwen3vl with mixture-of-experts FFNs) or "gemma3".
  std::string arch = "llama";
  std::array<int32_t, 4> rope_sections{};
  int32_t n_deepstack = 0;     // qwen3vl: image rows carry this many extra slices
  int32_t head_dim = 0;        // attention.key_length (0: d_model / n_heads); gemma3 differs
  // gemma3: the sliding window, its layer pattern, the local layers' RoPE base, and the global
  // layers' linear RoPE scaling factor (1: none written).
  int32_t n_swa = 0;
  int32_t swa_pattern = 6;
  float rope_theta_swa = 10000.0f;
  float rope_scale = 1.0f;
  // qwen3vlmoe: each layer's FFN is n_expert_used of n_expert experts of width d_ff_exp.
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t d_ff_exp = 0;
};

enum class ProjectorKind {
  kNone,
  kMlp,       // LLaVA (1.6 with grid_pinpoints)
  kIdefics3,  // SmolVLM
  kQwen2vl,   // qwen2vl_merger
  kQwen25vl,  // qwen2.5vl_merger (RMSNorm, SwiGLU, window attention)
  kQwen3vl,   // qwen3vl_merger (learned positions, fused qkv, deepstack)
  kInternvl,  // internvl (layer scale, pixel shuffle, LayerNorm + MLP)
  kGemma3,    // gemma3 (SigLIP, average pool, soft-embedding norm, input projection)
};

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
  int32_t n_wa_pattern = 0;    // qwen2.5vl: every n-th block full attention, the others windowed
  std::vector<int32_t> deepstack_layers;  // qwen3vl: blocks whose output feeds the text model
  // mlp: LLaVA-1.6's (width, height) pairs and feature layer (0: neither key written).
  std::vector<int32_t> grid_pinpoints;
  int32_t feature_layer = 0;
  int32_t max_tiles = 12;      // internvl: preproc_max_tiles (min 1)
  // internvl: InternViT-6B's blocks (q/k norms over the whole projection, norms without biases;
  // RMSNorm where llama.cpp's rule says so: width 3200 and 45 blocks).
  bool internvit_6b_blocks = false;
};

struct ModelPreset {
  std::string name;
  std::string description;
  TextShape text;
  VisionShape vision;
};

// Presets: "tiny" (test-sized SmolVLM-like), "demo" (the `make run` model), "smolvlm-256m"
// (SmolLM2-135M text + SigLIP-B/16 at 512, the benchmark shape), "smollm2-135m" (text only),
// "smolvlm-2b" (SmolLM2-1.7B-class text + SigLIP-so400m-class vision); the Qwen VL line:
// "tiny-qwen25vl" and "tiny-qwen3vl" (test-sized), "qwen2.5vl-3b" and "qwen3vl-2b" (the
// published shapes, for benchmarks); "llava16-vit" (LLaVA-1.6's CLIP ViT-L/14-336 with its
// pinpoints) and "internvl3-2b-vit" (InternViT-300M at 448), vision benchmarks with a small text
// model, and "llava16-mistral-7b" and "internvl3-2b" (the same towers with their models' text:
// Mistral-7B, Qwen2.5-1.5B); "tiny-internvl6b" (test-sized, InternViT-6B's blocks) and
// "internvit-6b-vit" (the InternViT-6B tower at 448 with a small text model); "gemma3-4b"
// (Gemma-3-4B: text and SigLIP-so400m at 896).
std::optional<ModelPreset> FindPreset(std::string_view name);
std::vector<std::string> PresetNames();

}  // namespace vlmd::engine::synth
