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

  // The Qwen VL line. Test-sized: 2 text layers of 64 (head 16: M-RoPE sections 2+3+3 pairs),
  // vision 2 or 4 blocks of 64 with 2 heads, patch 14 (16 for 3-VL).
  ModelPreset tq25;
  tq25.name = "tiny-qwen25vl";
  tq25.description = "test-sized Qwen2.5-VL-like model (window attention every other block)";
  tq25.text = {.n_layers = 2, .d_model = 64, .n_heads = 4, .n_kv_heads = 2, .d_ff = 256,
               .n_ctx = 2048, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
               .n_vocab_base = 4096, .arch = "qwen2vl", .rope_sections = {2, 3, 3, 0}};
  tq25.vision = {.projector = ProjectorKind::kQwen25vl, .image_size = 560, .patch_size = 14,
                 .n_layers = 2, .d_model = 64, .n_heads = 2, .d_ff = 128, .ln_eps = 1e-6f,
                 .n_wa_pattern = 2};
  p.push_back(tq25);
  ModelPreset tq3;
  tq3.name = "tiny-qwen3vl";
  tq3.description = "test-sized Qwen3-VL-like model (deepstack from 2 of 4 vision blocks)";
  // 3 text layers: deepstack slices go into the first n_deepstack layers, and llama.cpp
  // (3f545be) fails to build its graph when they reach the last one.
  tq3.text = {.n_layers = 3, .d_model = 64, .n_heads = 4, .n_kv_heads = 2, .d_ff = 256,
              .n_ctx = 2048, .rope_theta = 5000000.0f, .rms_eps = 1e-6f, .tied_output = true,
              .n_vocab_base = 4096, .arch = "qwen3vl", .rope_sections = {4, 2, 2, 0},
              .n_deepstack = 2};
  tq3.vision = {.projector = ProjectorKind::kQwen3vl, .image_size = 128, .patch_size = 16,
                .n_layers = 4, .d_model = 64, .n_heads = 2, .d_ff = 256, .ln_eps = 1e-6f,
                .deepstack_layers = {1, 2}};
  p.push_back(tq3);

  // The same with Qwen3-VL MoE's decoder: 4 experts of width 64, 2 used per token.
  ModelPreset tq3moe = tq3;
  tq3moe.name = "tiny-qwen3vlmoe";
  tq3moe.description = "test-sized Qwen3-VL MoE-like model (4 experts, 2 per token)";
  tq3moe.text.arch = "qwen3vlmoe";
  tq3moe.text.n_expert = 4;
  tq3moe.text.n_expert_used = 2;
  tq3moe.text.d_ff_exp = 64;
  p.push_back(tq3moe);

  // Qwen2.5-VL-3B: Qwen2.5-3B text (36 x 2048, 16 heads / 2 KV heads, ffn 11008, vocab 151936,
  // tied, M-RoPE [16, 24, 24, 0]) + ViT 32 x 1280 (16 heads, SwiGLU 3420, patch 14, full
  // attention in blocks 7, 15, 23, 31: n_wa_pattern 8).
  ModelPreset q25;
  q25.name = "qwen2.5vl-3b";
  q25.description = "Qwen2.5-VL-3B shape: Qwen2.5-3B text + 32-block windowed ViT";
  q25.text = {.n_layers = 36, .d_model = 2048, .n_heads = 16, .n_kv_heads = 2, .d_ff = 11008,
              .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
              .n_vocab_base = 151643, .arch = "qwen2vl", .rope_sections = {16, 24, 24, 0}};
  q25.vision = {.projector = ProjectorKind::kQwen25vl, .image_size = 560, .patch_size = 14,
                .n_layers = 32, .d_model = 1280, .n_heads = 16, .d_ff = 3420, .ln_eps = 1e-6f,
                .n_wa_pattern = 8};
  p.push_back(q25);

  // Qwen3-VL-2B: Qwen3-1.7B text (28 x 2048, 16 heads / 8 KV heads, head 128, ffn 6144, tied,
  // interleaved M-RoPE [24, 20, 20, 0], 3 deepstack slices) + ViT 24 x 1024 (16 heads, GELU
  // 4096, patch 16, 48 x 48 learned positions, deepstack from blocks 5, 11, 17).
  ModelPreset q3;
  q3.name = "qwen3vl-2b";
  q3.description = "Qwen3-VL-2B shape: Qwen3-1.7B text + 24-block ViT with deepstack";
  q3.text = {.n_layers = 28, .d_model = 2048, .n_heads = 16, .n_kv_heads = 8, .d_ff = 6144,
             .n_ctx = 8192, .rope_theta = 5000000.0f, .rms_eps = 1e-6f, .tied_output = true,
             .n_vocab_base = 151643, .arch = "qwen3vl", .rope_sections = {24, 20, 20, 0},
             .n_deepstack = 3};
  q3.vision = {.projector = ProjectorKind::kQwen3vl, .image_size = 768, .patch_size = 16,
               .n_layers = 24, .d_model = 1024, .n_heads = 16, .d_ff = 4096, .ln_eps = 1e-6f,
               .deepstack_layers = {5, 11, 17}};
  p.push_back(q3);

  // Qwen3-VL-30B-A3B: Qwen3-30B-A3B text (48 x 2048, 32 heads / 4 KV heads, head 128, 128
  // experts of width 768 with 8 used per token, untied head, interleaved M-RoPE [24, 20, 20, 0],
  // 3 deepstack slices) + the ViT of Qwen3-VL-8B (27 x 1152, 16 heads, GELU 4304, patch 16,
  // deepstack from blocks 8, 16, 24). ~31B weights: `vlmd-synth --text-layers` writes fewer
  // decoder layers of the same shape for a benchmark.
  ModelPreset q3moe;
  q3moe.name = "qwen3vl-30b-a3b";
  q3moe.description = "Qwen3-VL-30B-A3B shape: Qwen3-30B-A3B MoE text + 27-block ViT with deepstack";
  q3moe.text = {.n_layers = 48, .d_model = 2048, .n_heads = 32, .n_kv_heads = 4, .d_ff = 6144,
                .n_ctx = 8192, .rope_theta = 5000000.0f, .rms_eps = 1e-6f, .tied_output = false,
                .n_vocab_base = 151643, .arch = "qwen3vlmoe", .rope_sections = {24, 20, 20, 0},
                .n_deepstack = 3, .head_dim = 128, .n_expert = 128, .n_expert_used = 8,
                .d_ff_exp = 768};
  q3moe.vision = {.projector = ProjectorKind::kQwen3vl, .image_size = 768, .patch_size = 16,
                  .n_layers = 27, .d_model = 1152, .n_heads = 16, .d_ff = 4304, .ln_eps = 1e-6f,
                  .deepstack_layers = {8, 16, 24}};
  p.push_back(q3moe);

  // Vision towers for encoder benchmarks (a small llama text model of the projector's width).
  // LLaVA-1.6-Mistral-7B: CLIP ViT-L/14 at 336 (24 blocks of 1024, 16 heads, ffn 4096, quick
  // GELU; feature_layer 23: the second-to-last block's features, as LLaVA uses them),
  // pinpoints 336x672, 672x336, 672x672, 1008x336, 336x1008, into a 4096-wide text model.
  ModelPreset l16;
  l16.name = "llava16-vit";
  l16.description = "LLaVA-1.6 vision tower: CLIP ViT-L/14-336 + mlp, anyres pinpoints";
  l16.text = {.n_layers = 2, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8, .d_ff = 1024,
              .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-5f, .tied_output = true,
              .n_vocab_base = 4096};
  l16.vision = {.projector = ProjectorKind::kMlp, .image_size = 336, .patch_size = 14, .n_layers = 24,
                .d_model = 1024, .n_heads = 16, .d_ff = 4096, .ln_eps = 1e-5f,
                .grid_pinpoints = {336, 672, 672, 336, 672, 672, 1008, 336, 336, 1008},
                .feature_layer = 23};
  p.push_back(l16);

  // InternVL3-2B: InternViT-300M at 448 (24 blocks of 1024, 16 heads, ffn 4096, GELU, layer
  // scale, patch 14), pixel shuffle 2 -> 256 tokens per tile, tiles 1..12, into 1536 (Qwen2.5-1.5B).
  ModelPreset iv;
  iv.name = "internvl3-2b-vit";
  iv.description = "InternVL3-2B vision tower: InternViT-300M 448px + pixel shuffle + MLP";
  iv.text = {.n_layers = 2, .d_model = 1536, .n_heads = 12, .n_kv_heads = 2, .d_ff = 1024,
             .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
             .n_vocab_base = 4096};
  iv.vision = {.projector = ProjectorKind::kInternvl, .image_size = 448, .patch_size = 14,
               .n_layers = 24, .d_model = 1024, .n_heads = 16, .d_ff = 4096, .scale_factor = 2,
               .ln_eps = 1e-6f, .max_tiles = 12};
  p.push_back(iv);

  // Test-sized InternVL with InternViT-6B's blocks (q/k norms over the whole projection, norms
  // without biases; LayerNorm at this size, as llama.cpp decides by shape) and qwen2 text.
  ModelPreset iv6 = iv;
  iv6.name = "tiny-internvl6b";
  iv6.description = "test-sized InternVL with InternViT-6B's blocks (q/k norms) and qwen2 text";
  iv6.text = {.n_layers = 2, .d_model = 64, .n_heads = 4, .n_kv_heads = 2, .d_ff = 256,
              .n_ctx = 2048, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
              .n_vocab_base = 4096, .arch = "qwen2"};
  iv6.vision.image_size = 56;
  iv6.vision.n_layers = 2;
  iv6.vision.d_model = 64;
  iv6.vision.n_heads = 2;
  iv6.vision.d_ff = 128;
  iv6.vision.max_tiles = 4;
  iv6.vision.internvit_6b_blocks = true;
  p.push_back(iv6);

  // InternViT-6B (InternVL 2.5/3 at 26B-78B): 45 blocks of 3200, 25 heads, ffn 12800, q/k norms
  // and RMSNorm, at 448, into 5120 (Qwen2.5-32B's width; 2 small text layers).
  ModelPreset iv6b;
  iv6b.name = "internvit-6b-vit";
  iv6b.description = "InternViT-6B vision tower (RMSNorm, q/k norms) at 448px + pixel shuffle + MLP";
  iv6b.text = {.n_layers = 2, .d_model = 5120, .n_heads = 40, .n_kv_heads = 8, .d_ff = 1024,
               .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
               .n_vocab_base = 4096};
  iv6b.vision = {.projector = ProjectorKind::kInternvl, .image_size = 448, .patch_size = 14,
                 .n_layers = 45, .d_model = 3200, .n_heads = 25, .d_ff = 12800, .scale_factor = 2,
                 .ln_eps = 1e-6f, .max_tiles = 12, .internvit_6b_blocks = true};
  p.push_back(iv6b);

  // The whole models of the two towers above, for the text benchmarks. InternVL3-2B's text is
  // Qwen2.5-1.5B (28 x 1536, 12 heads / 2 KV heads, ffn 8960, vocab 151936, tied).
  ModelPreset iv_full = iv;
  iv_full.name = "internvl3-2b";
  iv_full.description = "InternVL3-2B shape: Qwen2.5-1.5B text + InternViT-300M 448px";
  iv_full.text = {.n_layers = 28, .d_model = 1536, .n_heads = 12, .n_kv_heads = 2, .d_ff = 8960,
                  .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
                  .n_vocab_base = 151643, .arch = "qwen2"};
  p.push_back(iv_full);
  // LLaVA-1.6-Mistral-7B's text is Mistral-7B-Instruct-v0.2 (32 x 4096, 32 heads / 8 KV heads,
  // ffn 14336, vocab 32000, an output head of its own, RoPE base 1e6).
  ModelPreset l16_full = l16;
  l16_full.name = "llava16-mistral-7b";
  l16_full.description = "LLaVA-1.6-Mistral-7B shape: Mistral-7B text + CLIP ViT-L/14-336 anyres";
  l16_full.text = {.n_layers = 32, .d_model = 4096, .n_heads = 32, .n_kv_heads = 8,
                   .d_ff = 14336, .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-5f,
                   .tied_output = false, .n_vocab_base = 32000};
  p.push_back(l16_full);

  // Gemma-3-4B: 34 layers of 2560, 8 heads / 4 KV heads of 256 (q 2048 != d_model), ffn 10240,
  // vocab 262144, tied; window 1024, 5 local layers (base 1e4) per global one (base 1e6, linear
  // scaling 8) + SigLIP-so400m at 896 (27 x 1152, 16 heads, ffn 4304, patch 14: 64 x 64
  // patches pooled 4x4 into 256 tokens).
  ModelPreset g4;
  g4.name = "gemma3-4b";
  g4.description = "Gemma-3-4B shape: text with sliding-window layers + SigLIP-so400m 896px";
  g4.text = {.n_layers = 34, .d_model = 2560, .n_heads = 8, .n_kv_heads = 4, .d_ff = 10240,
             .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
             .n_vocab_base = 262140, .arch = "gemma3", .head_dim = 256, .n_swa = 1024,
             .swa_pattern = 6, .rope_theta_swa = 10000.0f, .rope_scale = 8.0f};
  g4.vision = {.projector = ProjectorKind::kGemma3, .image_size = 896, .patch_size = 14,
               .n_layers = 27, .d_model = 1152, .n_heads = 16, .d_ff = 4304, .scale_factor = 4,
               .ln_eps = 1e-6f};
  p.push_back(g4);
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
