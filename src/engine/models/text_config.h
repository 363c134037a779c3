// Hyperparameters of a llama-family text decoder, read once from GGUF keys
// ("<arch>.embedding_length", ...), as llama.cpp writes them.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"

namespace vlmd::engine::models {

struct TextConfig {
  std::string arch;         // "llama" | "qwen2" | "qwen2vl" | "qwen3vl" | "gemma3"
  int32_t n_layers = 0;
  int32_t d_model = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;     // attention.key_length, default d_model / n_heads
  int32_t d_ff = 0;
  int32_t n_ctx_train = 0;
  int32_t n_vocab = 0;      // rows of token_embd
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rope_attn_factor = 1.0f; // rope.scaling.attn_factor: scales the rotated values
  int32_t n_rot = 0;        // rope.dimension_count, default head_dim
  bool rope_neox = false;   // qwen*: pairs (i, i + n_rot/2); llama: adjacent pairs
  // Multi-section RoPE (ops::RopeParams::sections): qwen2vl blocks (M-RoPE), qwen3vl interleaved
  // (IMRoPE); all zero for one-position models.
  std::array<int32_t, 4> rope_sections{};
  bool rope_interleaved = false;
  bool qk_norm = false;     // qwen3vl: per-head RMSNorm of q and k before RoPE
  bool untied_head = false; // internlm2: output.weight required (registry.h)
  bool phi3 = false;        // fused gate/up, LongRoPE factors (registry.h)
  // Mixture of experts (qwen3moe, qwen3vlmoe; 0 experts: a dense FFN of d_ff): each layer's FFN
  // is n_expert_used of n_expert SiLU-gated experts of width d_ff_exp (moe_ffn.h).
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t d_ff_exp = 0;
  // rope.scaling.original_context_length (default n_ctx_train): phi3 takes its long RoPE
  // factors for sequences of more positions than this.
  int32_t n_ctx_orig = 0;
  // qwen3vl deepstack: an image row carries 1 + n_deepstack slices of d_model; slice l + 1 is
  // added to the residual stream after layer l (text rows: zeros).
  int32_t n_deepstack = 0;
  // Gemma 3 (registry.h): the family's extras. Layer l is a sliding-window layer (attends to the
  // last n_swa positions, RoPE base rope_theta_swa, no frequency scaling) iff
  // swa_pattern == 0 or l % swa_pattern < swa_pattern - 1 (llama.cpp's set_swa_pattern); with
  // n_swa == 0 every layer is global.
  bool gemma3 = false;
  int32_t n_swa = 0;
  int32_t swa_pattern = 6;
  float rope_theta_swa = 10000.0f;
  float attn_scale = 0.0f;       // queries are multiplied by this before attention (Gemma 3)
  float logit_softcap = 0.0f;    // > 0: logits = c * tanh(logits / c)
  bool is_swa_layer(int32_t l) const {
    return n_swa > 0 && (swa_pattern == 0 || l % swa_pattern < swa_pattern - 1);
  }
  int32_t q_dim() const { return n_heads * head_dim; }
  // Width of an injected embedding row (ForwardBatch::embeddings).
  int32_t n_embd_inp() const { return d_model * (1 + n_deepstack); }
  bool multi_rope() const {
    return rope_sections[0] + rope_sections[1] + rope_sections[2] + rope_sections[3] > 0;
  }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and validates the config. UNIMPLEMENTED for an architecture not in kTextArchitectures or
// unsupported rope scaling; INVALID_ARGUMENT / NOT_FOUND naming the key for bad or missing values.
Result<TextConfig> ReadTextConfig(const gguf::GgufFile& file);

}  // namespace vlmd::engine::models
