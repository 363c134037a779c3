// Hyperparameters of a CLIP-family vision encoder + projector ("mmproj" GGUF, general.architecture
// = clip), read once from the clip.* keys llama.cpp writes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/ops/activation.h"

namespace vlmd::engine::models {

enum class ProjectorType : uint8_t {
  kMlp,       // LLaVA: mm.0 -> GELU -> mm.2 (class token dropped)
  kIdefics3,  // SmolVLM / Idefics3: pixel shuffle by scale_factor, then mm.model.fc
  // The Qwen VL line: dynamic-resolution ViT with 2-D RoPE, 2x2 patch merger (FAMILIES.md).
  kQwen2vl,   // qwen2vl_merger: LayerNorm, quick-GELU FFN
  kQwen25vl,  // qwen2.5vl_merger: RMSNorm, SwiGLU FFN, window attention
  kQwen3vl,   // qwen3vl_merger: LayerNorm, GELU FFN, learned positions, fused qkv, deepstack
  // InternVL 2/2.5/3: InternViT (layer scale), pixel shuffle, LayerNorm + GELU MLP; tiles fitted
  // to the best of a min/max tile grid plus a thumbnail (grid_pinpoints).
  kInternvl,
  // Gemma 3: SigLIP at a fixed size (bilinear letterbox), k x k average pool, soft-embedding
  // RMSNorm and the input projection; its image rows attend to each other both ways.
  kGemma3,
};

// True for the projectors of the Qwen VL line (one dynamic-size image, no tiles; registry.h).
inline bool IsQwenVl(ProjectorType p) {
  return p == ProjectorType::kQwen2vl || p == ProjectorType::kQwen25vl ||
         p == ProjectorType::kQwen3vl;
}

struct VisionConfig {
  ProjectorType projector = ProjectorType::kMlp;
  std::string projector_name;  // clip.projector_type as written ("mlp", "idefics3")
  int32_t image_size = 0;      // encoder input side, pixels (clip.vision.image_size)
  int32_t patch_size = 0;      // pixels
  int32_t d_model = 0;         // clip.vision.embedding_length
  int32_t d_ff = 0;
  // The file names fc1 "ffn_down" and fc2 "ffn_up" (older conversions; vision_config.cpp).
  bool ffn_swapped = false;
  int32_t n_layers = 0;        // blocks stored in the file
  int32_t n_heads = 0;
  int32_t head_dim = 0;        // d_model / n_heads
  int32_t projection_dim = 0;  // width of the projector output = text model d_model
  float eps = 1e-6f;           // LayerNorm epsilon
  std::array<float, 3> image_mean{};
  std::array<float, 3> image_std{};
  // FFN activation: clip.use_gelu -> GELU (tanh form, ggml_gelu); clip.use_silu -> SiLU
  // (Qwen2.5-VL's gated FFN; other families refuse it); otherwise quick GELU, as llama.cpp.
  ops::Activation ffn_act = ops::Activation::kGeluQuick;
  // Qwen VL: patches merged 2x2 per side into one token; the image is resized so that its sides
  // are multiples of patch_size * spatial_merge and its merged tokens stay within
  // [min_tokens, max_tokens] (llama.cpp's set_limit_image_tokens(8, 4096)).
  int32_t spatial_merge = 2;
  int32_t min_tokens = 8;
  int32_t max_tokens = 4096;
  // Qwen2.5-VL: layer il attends within windows of window_units x window_units merged tokens
  // unless (il + 1) % n_wa_pattern == 0 (full attention). 0: every layer full.
  int32_t n_wa_pattern = 0;
  int32_t window_units = 4;  // llama.cpp's 112-pixel attention window / 28 pixels per token
  // LLaVA-1.6 ("anyres", an mlp projector with clip.vision.image_grid_pinpoints) and InternVL
  // (every a x b grid of min_tiles..max_tiles tiles, InternVlGrids): the resolutions (width,
  // height; multiples of image_size) an image may be fitted to before it is cut into image_size
  // slices, followed by an image_size overview (thumbnail). Empty: one tile (LLaVA-1.5).
  std::vector<std::array<int32_t, 2>> grid_pinpoints;
  // ViT blocks run (mlp): clip.vision.feature_layer's deepest entry when given, else
  // n_layers - 1 (llama.cpp's max_feature_layer).
  int32_t n_layers_run = 0;
  int32_t scale_factor = 1;        // idefics3 / internvl pixel-shuffle factor per side
  int32_t preproc_image_size = 0;  // idefics3: longest edge before tiling (0: image_size)

  int32_t patches_per_side() const { return image_size / patch_size; }
  int32_t n_patches() const { return patches_per_side() * patches_per_side(); }
  // Tokens of a tile whose patch grid is merged scale_factor x scale_factor (idefics3 and
  // internvl pixel shuffle, gemma3 average pool).
  int64_t merged_tokens_per_tile() const {
    const int64_t g = patches_per_side() / scale_factor;
    return g * g;
  }
};

// InternVL's candidate grids (clip.cpp's set_internvl_dhr_res_candidates): every (a * side,
// b * side) with a tiles across in [min_tiles, max_tiles] (outer) and b down in
// [max(ceil(min_tiles / a), min_tiles), min(max_tiles / a, max_tiles)], in that order.
std::vector<std::array<int32_t, 2>> InternVlGrids(int32_t side, int32_t min_tiles, int32_t max_tiles);

// Reads and validates the config. UNIMPLEMENTED for a projector type vlmd does not run or
// a file without a vision encoder; NOT_FOUND / INVALID_ARGUMENT naming the key for missing or
// inconsistent values (e.g. image_size not a multiple of patch_size).
Result<VisionConfig> ReadVisionConfig(const gguf::GgufFile& file);

}  // namespace vlmd::engine::models
