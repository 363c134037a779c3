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
  std::string arch;         // "llama" | "qwen2" | "qwen2vl" | "qwen3vl"
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
  int32_t n_rot = 0;        // rope.dimension_count, default head_dim
  bool rope_neox = false;   // qwen*: pairs (i, i + n_rot/2); llama: adjacent pairs
  // Multi-section RoPE (ops::RopeParams::sections): qwen2vl blocks (M-RoPE), qwen3vl interleaved
  // (IMRoPE); all zero for one-position models.
  std::array<int32_t, 4> rope_sections{};
  bool rope_interleaved = false;
  bool qkv_bias = false;    // qwen2 / qwen2vl have q/k/v biases (optional tensors)
  bool qk_norm = false;     // qwen3vl: per-head RMSNorm of q and k before RoPE
  // qwen3vl deepstack: an image row carries 1 + n_deepstack slices of d_model; slice l + 1 is
  // added to the residual stream after layer l (text rows: zeros).
  int32_t n_deepstack = 0;
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
