// The model families vlmd runs, as two explicit tables (no static self-registration): a text
// decoder per GGUF general.architecture and a vision family per mmproj clip.projector_type. A
// family is a row here plus its code; the loaders refuse any other name, listing these.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "engine/models/vision_config.h"

namespace vlmd::engine::models {

// What distinguishes the text decoders (all run by TextDecoder's one decoder stack). Optional
// q/k/v biases are not a trait: every decoder loads them when the file has them, as llama.cpp's
// create_tensor_qkv does.
struct TextArchitecture {
  std::string_view name;     // general.architecture, also the key prefix
  bool rope_neox = false;    // rotary pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  bool qk_norm = false;      // per-head RMSNorm of q and k before RoPE (attn_{q,k}_norm)
  bool mrope = false;        // M-RoPE: <arch>.rope.dimension_sections required
  bool rope_interleaved = false;  // IMRoPE (Qwen3-VL)
  bool deepstack = false;    // <arch>.n_deepstack_layers: image rows carry extra slices
  // Gemma 3: token rows scaled by sqrt(d_model), RMSNorm after attention and after the FFN
  // (post_attention_norm, post_ffw_norm), GELU-gated FFN, sliding-window layers with their own
  // RoPE base, queries scaled before attention, optional final logit soft-capping.
  bool gemma3 = false;
  bool untied_head = false;  // output.weight required (no head tied to token_embd)
  // Phi-3: ffn_up holds [gate | up] (2 x feed_forward_length rows, no ffn_gate), and the RoPE
  // frequencies are divided by rope_factors_long or rope_factors_short (LongRoPE), long when a
  // sequence's context exceeds rope.scaling.original_context_length, as llama.cpp picks them.
  bool phi3 = false;
  // Qwen3's mixture of experts: ffn_gate_inp routes each row to expert_used_count of
  // expert_count SiLU-gated experts (ffn_{gate,up,down}_exps) instead of one dense FFN.
  bool moe = false;
};

// What distinguishes the vision families.
struct VisionFamily {
  std::string_view projector_type;  // clip.projector_type
  ProjectorType type;
  bool dynamic_size = false;  // one image at a size of its own (Qwen VL), not fixed tiles
  bool silu_ffn = false;      // clip.use_silu is allowed (gated SiLU FFN)
};

std::span<const TextArchitecture> TextArchitectures();
std::span<const VisionFamily> VisionFamilies();
// nullptr when vlmd does not run `name`.
const TextArchitecture* FindTextArchitecture(std::string_view name);
const VisionFamily* FindVisionFamily(std::string_view projector_type);
// "llama, qwen2, ..." for error messages.
std::string SupportedTextArchitectures();
std::string SupportedProjectors();

}  // namespace vlmd::engine::models
