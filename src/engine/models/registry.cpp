// The family tables (see registry.h). Facts per family: ../shared/docs/FAMILIES.md.
#include "engine/models/registry.h"

namespace vlmd::engine::models {
namespace {

constexpr TextArchitecture kTextArchitectures[] = {
    {.name = "llama"},
    // InternLM2 (InternVL2-2B and -8B, InternVL2.5 on InternLM2.5): llama's block as llama.cpp
    // builds it (src/models/internlm2.cpp: RMSNorm, adjacent-pair RoPE, SiLU-gated FFN, no
    // rope_freqs) under its own key prefix, with a head of its own.
    {.name = "internlm2", .untied_head = true},
    {.name = "qwen2", .rope_neox = true},
    // Phi-3 (InternVL2-4B on Phi-3-mini-128k): llama.cpp's phi3 (src/models/phi3.cpp; its
    // sliding window is disabled there, so here too).
    {.name = "phi3", .rope_neox = true, .phi3 = true},
    {.name = "qwen2vl", .rope_neox = true, .mrope = true},
    // Qwen3 (InternVL3.5): Qwen3-VL's decoder without M-RoPE and deepstack (llama.cpp's qwen3).
    {.name = "qwen3", .rope_neox = true, .qk_norm = true},
    {.name = "qwen3vl", .rope_neox = true, .qk_norm = true, .mrope = true, .rope_interleaved = true,
     .deepstack = true},
    // Qwen3 MoE (InternVL3.5-30B-A3B) and Qwen3-VL MoE (Qwen3-VL-30B-A3B, -235B-A22B): the two
    // above with the mixture-of-experts FFN (llama.cpp's qwen3moe, qwen3vlmoe).
    {.name = "qwen3moe", .rope_neox = true, .qk_norm = true, .moe = true},
    {.name = "qwen3vlmoe", .rope_neox = true, .qk_norm = true, .mrope = true,
     .rope_interleaved = true, .deepstack = true, .moe = true},
    {.name = "gemma3", .rope_neox = true, .qk_norm = true, .gemma3 = true},
};

constexpr VisionFamily kVisionFamilies[] = {
    {.projector_type = "mlp", .type = ProjectorType::kMlp},
    {.projector_type = "idefics3", .type = ProjectorType::kIdefics3},
    {.projector_type = "qwen2vl_merger", .type = ProjectorType::kQwen2vl, .dynamic_size = true},
    {.projector_type = "qwen2.5vl_merger", .type = ProjectorType::kQwen25vl, .dynamic_size = true,
     .silu_ffn = true},
    {.projector_type = "qwen3vl_merger", .type = ProjectorType::kQwen3vl, .dynamic_size = true},
    {.projector_type = "internvl", .type = ProjectorType::kInternvl},
    {.projector_type = "gemma3", .type = ProjectorType::kGemma3},
};

template <typename Row, typename Field>
std::string Names(std::span<const Row> rows, Field field) {
  std::string out;
  for (const Row& r : rows) out += (out.empty() ? "" : ", ") + std::string(r.*field);
  return out;
}

}  // namespace

std::span<const TextArchitecture> TextArchitectures() { return kTextArchitectures; }
std::span<const VisionFamily> VisionFamilies() { return kVisionFamilies; }

const TextArchitecture* FindTextArchitecture(std::string_view name) {
  for (const TextArchitecture& a : kTextArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const VisionFamily* FindVisionFamily(std::string_view projector_type) {
  for (const VisionFamily& f : kVisionFamilies) {
    if (f.projector_type == projector_type) return &f;
  }
  return nullptr;
}

std::string SupportedTextArchitectures() {
  return Names(TextArchitectures(), &TextArchitecture::name);
}

std::string SupportedProjectors() { return Names(VisionFamilies(), &VisionFamily::projector_type); }

}  // namespace vlmd::engine::models
