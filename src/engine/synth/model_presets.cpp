// The preset table. Shapes follow the published configs of the named models (layer counts,
// widths, heads); weights are always random.
#include "engine/synth/model_presets.h"

namespace vlmd::engine::synth {
namespace {

std::vector<ModelPreset> MakePresets() {
  std::vector<ModelPreset> p;

  ModelPreset tiny;
  tiny.name = "tiny";
  tiny.description = "test-sized SmolVLM-like model (2 layers, width 64; vision 2 layers)";
  tiny.vision.projector = ProjectorKind::kIdefics3;
  p.push_back(tiny);

  ModelPreset demo;
  demo.name = "demo";
  demo.description = "small SmolVLM-like demo model for `make run` (random weights)";
  demo.text = {.n_layers = 4, .d_model = 256, .n_heads = 4, .n_kv_heads = 2, .d_ff = 768,
               .n_ctx = 4096, .rope_theta = 100000.0f, .rms_eps = 1e-5f, .tied_output = true,
               .n_vocab_base = 8192};
  demo.vision = {.projector = ProjectorKind::kIdefics3, .image_size = 224, .patch_size = 16,
                 .n_layers = 2, .d_model = 192, .n_heads = 3, .d_ff = 768, .scale_factor = 2,
                 .preproc_image_size = 448, .ln_eps = 1e-6f};
  p.push_back(demo);

  // SmolLM2-135M: 30 layers, 576 wide, 9 heads / 3 KV heads, ffn 1536, vocab 49152 (+128 added).
  TextShape smollm2_135m{.n_layers = 30, .d_model = 576, .n_heads = 9, .n_kv_heads = 3,
                         .d_ff = 1536, .n_ctx = 8192, .rope_theta = 100000.0f, .rms_eps = 1e-5f,
                         .tied_output = true, .n_vocab_base = 49152};
  ModelPreset smollm;
  smollm.name = "smollm2-135m";
  smollm.description = "SmolLM2-135M shape, text only";
  smollm.text = smollm2_135m;
  p.push_back(smollm);

  // SmolVLM-256M: SmolLM2-135M + SigLIP-B/16 at 512x512 (12 layers, 768, ffn 3072, 12 heads),
  // pixel shuffle 4 -> 64 tokens per tile; images resized to longest edge 2048 (16 tiles).
  ModelPreset s256;
  s256.name = "smolvlm-256m";
  s256.description = "SmolVLM-256M shape: SmolLM2-135M text + SigLIP-B/16 512px vision";
  s256.text = smollm2_135m;
  s256.vision = {.projector = ProjectorKind::kIdefics3, .image_size = 512, .patch_size = 16,
                 .n_layers = 12, .d_model = 768, .n_heads = 12, .d_ff = 3072, .scale_factor = 4,
                 .preproc_image_size = 2048, .ln_eps = 1e-6f};
  p.push_back(s256);

  // SmolVLM2-2.2B class: SmolLM2-1.7B text (24 x 2048, 32 heads, ffn 8192) + SigLIP-so400m
  // (27 layers, 1152, ffn 4304, 16 heads, patch 14 at 384), pixel shuffle 3.
  ModelPreset s2b;
  s2b.name = "smolvlm-2b";
  s2b.description = "2B-class shape: SmolLM2-1.7B text + SigLIP-so400m vision";
  s2b.text = {.n_layers = 24, .d_model = 2048, .n_heads = 32, .n_kv_heads = 32, .d_ff = 8192,
              .n_ctx = 8192, .rope_theta = 130000.0f, .rms_eps = 1e-5f, .tied_output = true,
              .n_vocab_base = 49152};
  s2b.vision = {.projector = ProjectorKind::kIdefics3, .image_size = 384, .patch_size = 14,
                .n_layers = 27, .d_model = 1152, .n_heads = 16, .d_ff = 4304, .scale_factor = 3,
                .preproc_image_size = 1536, .ln_eps = 1e-6f};
  p.push_back(s2b);
  return p;
}

const std::vector<ModelPreset>& Presets() {
  static const std::vector<ModelPreset> presets = MakePresets();
  return presets;
}

}  // namespace

std::optional<ModelPreset> FindPreset(std::string_view name) {
  for (const auto& p : Presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& p : Presets()) names.push_back(p.name);
  return names;
}

}  // namespace vlmd::engine::synth
