// Reading the text-decoder hyperparameters (see text_config.h).
#include "engine/models/text_config.h"

#include <cmath>
#include <vector>

#include "engine/models/registry.h"

namespace vlmd::engine::models {
namespace {

Result<int32_t> GetPositive(const gguf::GgufFile& f, const std::string& key, int64_t max) {
  VLMD_ASSIGN_OR_RETURN(uint32_t v, f.GetU32(key));
  if (v == 0 || v > max) {
    return InvalidArgumentError("model key " + key + " = " + std::to_string(v) +
                                " is outside [1, " + std::to_string(max) + "]");
  }
  return static_cast<int32_t>(v);
}

Result<int32_t> GetOptionalPositive(const gguf::GgufFile& f, const std::string& key,
                                    int32_t fallback, int64_t max) {
  if (f.Find(key) == nullptr) return fallback;
  return GetPositive(f, key, max);
}

// Gemma 3's keys (llama.cpp's llama_model_gemma3::load_arch_hparams): the sliding window, its
// layer pattern (default 6) and RoPE base, the soft-cap, and the query scale, 1/sqrt(head_dim)
// (1/sqrt(d_model / n_heads) for the 62-layer 27B, as llama.cpp hard-codes).
Status ReadGemma3Keys(const gguf::GgufFile& f, const std::string& p, TextConfig* c) {
  c->gemma3 = true;
  if (f.Find(p + "attention.sliding_window") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(uint32_t n_swa, f.GetU32(p + "attention.sliding_window"));
    if (n_swa > (1u << 24)) return InvalidArgumentError(p + "attention.sliding_window is out of range");
    c->n_swa = static_cast<int32_t>(n_swa);
  }
  if (c->n_swa > 0) {
    // A per-layer array (Gemma 3n / 4 converters write one) is not a number: llama.cpp's gemma3
    // loader then keeps its default period, and so does vlmd (on Gemma 3 the arrays say the
    // same).
    if (const auto* v = f.Find(p + "attention.sliding_window_pattern");
        v != nullptr && v->type != gguf::ValueType::kArray) {
      VLMD_ASSIGN_OR_RETURN(uint32_t pattern, f.GetU32(p + "attention.sliding_window_pattern"));
      if (pattern > 1024) return InvalidArgumentError(p + "attention.sliding_window_pattern is out of range");
      c->swa_pattern = static_cast<int32_t>(pattern);
    }
    if (f.Find(p + "rope.freq_base_swa") != nullptr) {
      VLMD_ASSIGN_OR_RETURN(c->rope_theta_swa, f.GetF32(p + "rope.freq_base_swa"));
      if (!(c->rope_theta_swa > 0.0f)) return InvalidArgumentError(p + "rope.freq_base_swa must be > 0");
    }
  }
  if (f.Find(p + "final_logit_softcapping") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(c->logit_softcap, f.GetF32(p + "final_logit_softcapping"));
    if (!(c->logit_softcap >= 0.0f)) return InvalidArgumentError(p + "final_logit_softcapping must be >= 0");
  }
  if (f.FindTensor("dense_2.weight") != nullptr || f.FindTensor("dense_3.weight") != nullptr) {
    return UnimplementedError("gemma3 with dense_2 / dense_3 projections (EmbeddingGemma)");
  }
  const int32_t per_head = c->n_layers == 62 ? c->d_model / c->n_heads : c->head_dim;
  if (per_head < 1) return InvalidArgumentError(p + "embedding_length is smaller than head_count");
  c->attn_scale = 1.0f / std::sqrt(static_cast<float>(per_head));
  return Status::Ok();
}

}  // namespace

Result<TextConfig> ReadTextConfig(const gguf::GgufFile& f) {
  TextConfig c;
  VLMD_ASSIGN_OR_RETURN(std::string_view arch, f.GetString("general.architecture"));
  c.arch = std::string(arch);
  const TextArchitecture* family = FindTextArchitecture(c.arch);
  if (family == nullptr) {
    return UnimplementedError("text architecture '" + c.arch + "' is not supported (supported: " +
                              SupportedTextArchitectures() + ")");
  }
  const std::string p = c.arch + ".";
  constexpr int64_t kMaxDim = 1 << 16, kMaxLayers = 1024;
  VLMD_ASSIGN_OR_RETURN(c.n_layers, GetPositive(f, p + "block_count", kMaxLayers));
  VLMD_ASSIGN_OR_RETURN(c.d_model, GetPositive(f, p + "embedding_length", kMaxDim));
  VLMD_ASSIGN_OR_RETURN(c.n_heads, GetPositive(f, p + "attention.head_count", 1024));
  VLMD_ASSIGN_OR_RETURN(c.n_kv_heads,
                        GetOptionalPositive(f, p + "attention.head_count_kv", c.n_heads, 1024));
  // A mixture of experts needs no dense width (llama.cpp reads it as optional for every
  // architecture; its MoE graphs use it only as the default expert width).
  VLMD_ASSIGN_OR_RETURN(c.d_ff, family->moe ? GetOptionalPositive(f, p + "feed_forward_length", 0, 1 << 20)
                                            : GetPositive(f, p + "feed_forward_length", 1 << 20));
  VLMD_ASSIGN_OR_RETURN(c.n_ctx_train,
                        GetOptionalPositive(f, p + "context_length", 4096, 1 << 24));
  if (c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgumentError("attention.head_count " + std::to_string(c.n_heads) +
                                " is not a multiple of head_count_kv " +
                                std::to_string(c.n_kv_heads));
  }
  VLMD_ASSIGN_OR_RETURN(c.head_dim, GetOptionalPositive(f, p + "attention.key_length",
                                                        c.d_model / c.n_heads, kMaxDim));
  if (c.head_dim < 1) {  // the default, when there are more heads than embedding values
    return InvalidArgumentError("attention.head_count " + std::to_string(c.n_heads) +
                                " is over embedding_length " + std::to_string(c.d_model) +
                                " and no attention.key_length says the head size");
  }
  if (f.Find(p + "attention.value_length") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(int32_t v_len, GetPositive(f, p + "attention.value_length", kMaxDim));
    if (v_len != c.head_dim) {
      return UnimplementedError("attention.value_length != key_length is not supported");
    }
  }
  if (f.Find(p + "attention.layer_norm_rms_epsilon") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(c.rms_eps, f.GetF32(p + "attention.layer_norm_rms_epsilon"));
  }
  if (f.Find(p + "rope.freq_base") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(c.rope_theta, f.GetF32(p + "rope.freq_base"));
  }
  if (!(c.rms_eps >= 0.0f) || !(c.rope_theta > 0.0f)) {
    return InvalidArgumentError("rms epsilon / rope.freq_base out of range");
  }
  VLMD_ASSIGN_OR_RETURN(c.n_rot, GetOptionalPositive(f, p + "rope.dimension_count", c.head_dim,
                                                     c.head_dim));
  if (c.n_rot % 2 != 0) return InvalidArgumentError("rope.dimension_count must be even");
  // RoPE scaling as llama.cpp reads it (llama_model::load_hparams, src/llama-model.cpp @3f545be):
  // the type defaults to "linear", its factor (or the older key rope.scale_linear) is optional,
  // "none" never scales; rope.scaling.attn_factor multiplies every rotated value (the cos and
  // sin of ggml's rope, its mscale) whatever the type.
  std::string scaling = "linear";
  if (f.Find(p + "rope.scaling.type") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(std::string_view type, f.GetString(p + "rope.scaling.type"));
    scaling = std::string(type);
  }
  // LongRoPE is phi3's frequency factors (text_decoder.cpp), which llama.cpp applies whatever
  // the file calls its type; a phi3 file that names it loads.
  const bool long_rope = family->phi3 && scaling == "longrope";
  if (scaling != "linear" && scaling != "none" && !long_rope) {
    return UnimplementedError("rope scaling '" + scaling + "' is not supported");
  }
  for (const char* key : {"rope.scaling.factor", "rope.scale_linear"}) {
    if (f.Find(p + key) == nullptr) continue;
    VLMD_ASSIGN_OR_RETURN(float factor, f.GetF32(p + key));
    if (!(factor >= 0.0f) || !std::isfinite(factor)) {
      return InvalidArgumentError(p + key + " must be >= 0 (0: no scaling)");
    }
    if (scaling != "none" && factor > 0.0f) c.rope_freq_scale = 1.0f / factor;
    break;  // llama.cpp reads the older key only without the newer one
  }
  if (f.Find(p + "rope.scaling.attn_factor") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(c.rope_attn_factor, f.GetF32(p + "rope.scaling.attn_factor"));
    if (!(c.rope_attn_factor > 0.0f) || !std::isfinite(c.rope_attn_factor)) {
      return InvalidArgumentError(p + "rope.scaling.attn_factor must be > 0");
    }
  }
  c.rope_neox = family->rope_neox;
  c.qk_norm = family->qk_norm;
  c.untied_head = family->untied_head;
  c.phi3 = family->phi3;
  // phi3 scales its queries by 1 / sqrt(head_dim) in f32 before the attention (llama.cpp's
  // src/models/phi3.cpp), so the f16 rounding of q comes after the scale, as for Gemma 3.
  if (c.phi3) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  VLMD_ASSIGN_OR_RETURN(c.n_ctx_orig, GetOptionalPositive(f, p + "rope.scaling.original_context_length",
                                                          c.n_ctx_train, 1 << 24));
  if (family->mrope) {
    // M-RoPE (FAMILIES.md): four sections of rotary pairs, required, summing to at most n_rot/2.
    VLMD_ASSIGN_OR_RETURN(std::vector<int32_t> sections,
                          f.GetI32Array(p + "rope.dimension_sections"));
    if (sections.size() != 4) {
      return InvalidArgumentError(p + "rope.dimension_sections must have 4 values, not " +
                                  std::to_string(sections.size()));
    }
    int64_t sum = 0;
    for (size_t i = 0; i < 4; ++i) {
      if (sections[i] < 0) return InvalidArgumentError(p + "rope.dimension_sections has a negative value");
      c.rope_sections[i] = sections[i];
      sum += sections[i];
    }
    if (sum == 0 || sum > c.n_rot / 2) {
      return InvalidArgumentError(p + "rope.dimension_sections sum " + std::to_string(sum) +
                                  " is outside [1, rope.dimension_count / 2 = " +
                                  std::to_string(c.n_rot / 2) + "]");
    }
    c.rope_interleaved = family->rope_interleaved;
  }
  if (family->deepstack && f.Find(p + "n_deepstack_layers") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(uint32_t n_ds, f.GetU32(p + "n_deepstack_layers"));
    if (n_ds > static_cast<uint32_t>(c.n_layers)) {
      return InvalidArgumentError(p + "n_deepstack_layers " + std::to_string(n_ds) +
                                  " exceeds block_count " + std::to_string(c.n_layers));
    }
    c.n_deepstack = static_cast<int32_t>(n_ds);
  }
  if (family->moe) {
    // Qwen3's MoE (llama.cpp's qwen3moe / qwen3vlmoe load_arch_hparams): expert_count (at most
    // LLAMA_MAX_EXPERTS) and expert_used_count required; the expert width defaults to
    // feed_forward_length / expert_used_count.
    VLMD_ASSIGN_OR_RETURN(c.n_expert, GetPositive(f, p + "expert_count", 1024));
    VLMD_ASSIGN_OR_RETURN(c.n_expert_used, GetPositive(f, p + "expert_used_count", c.n_expert));
    // An explicit 0 falls back as an absent key does (llama.cpp: n_ff_exp ? n_ff_exp : ...).
    c.d_ff_exp = c.d_ff / c.n_expert_used;
    if (f.Find(p + "expert_feed_forward_length") != nullptr) {
      VLMD_ASSIGN_OR_RETURN(uint32_t w, f.GetU32(p + "expert_feed_forward_length"));
      if (w > (1u << 20)) return InvalidArgumentError(p + "expert_feed_forward_length is out of range");
      if (w > 0) c.d_ff_exp = static_cast<int32_t>(w);
    }
    // Expert groups (DeepSeek-V3's group-limited choice), which llama.cpp applies to any MoE
    // whose file sets more than one: not implemented, so refused rather than chosen otherwise.
    if (f.Find(p + "expert_group_count") != nullptr) {
      VLMD_ASSIGN_OR_RETURN(uint32_t groups, f.GetU32(p + "expert_group_count"));
      if (groups > 1) {
        return UnimplementedError(p + "expert_group_count " + std::to_string(groups) +
                                  ": group-limited expert choice is not supported");
      }
    }
    if (c.d_ff_exp < 1) {
      return InvalidArgumentError(p + "expert_feed_forward_length is missing and feed_forward_length / "
                                  "expert_used_count is 0 (or feed_forward_length is missing too)");
    }
  }
  if (family->gemma3) VLMD_RETURN_IF_ERROR(ReadGemma3Keys(f, p, &c));
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFoundError("model tensor 'token_embd.weight' is missing");
  if (embd->n_dims != 2 || embd->ne[0] != c.d_model) {
    return InvalidArgumentError("token_embd.weight does not have rows of embedding_length");
  }
  c.n_vocab = static_cast<int32_t>(embd->ne[1]);
  return c;
}

}  // namespace vlmd::engine::models
