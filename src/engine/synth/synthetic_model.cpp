// Random-weight model writer (see synthetic_model.h). Weight init follows the fixtures' recipe:
// matrices N(0, 1/fan_in) so every block changes the residual stream by O(1); norm weights
// 1 + N(0, 0.1); biases N(0, 0.1).
#include "engine/synth/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <vector>

#include "engine/gguf/gguf_writer.h"
#include "engine/synth/synthetic_vocab.h"
#include "engine/tensor/quantize.h"
#include "engine/tensor/type_policy.h"

namespace vlmd::engine::synth {
namespace {

// xoshiro256+-style generator; normals approximated by the sum of four uniforms (Irwin-Hall),
// which is plenty for random weights and ~10x cheaper than Box-Muller on billions of values.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t result = s_[0] + s_[3];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = (s_[3] << 45) | (s_[3] >> 19);
    return result;
  }
  // Approximately N(0, 1): four 16-bit uniforms, centred and scaled to unit variance.
  float Normal() {
    const uint64_t r = Next();
    const float sum = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) +
                                         ((r >> 32) & 0xFFFF) + (r >> 48));
    constexpr float kMean = 4 * 32767.5f;
    constexpr float kInvStd = 1.0f / 37837.23f;  // sqrt(4 * (65536^2 - 1) / 12)
    return (sum - kMean) * kInvStd;
  }

 private:
  uint64_t s_[4];
};

enum class Init { kMatrix, kNorm, kBias, kPositional };

// Elements (1-D) or rows (2-D) of a tensor scaled after the draw (SynthOptions outliers).
struct ScaledRows {
  std::vector<int64_t> rows;
  float scale = 1.0f;
};

// `count` indices spread over [0, n) by a fixed stride (the same channels in every layer).
ScaledRows OutlierRows(int32_t count, int64_t n, float scale) {
  ScaledRows s;
  s.scale = scale;
  for (int64_t k = 0; k < std::min<int64_t>(count, n); ++k) s.rows.push_back((k * 7919 + 13) % n);
  return s;
}

// Holds generated tensor bytes until the writer has written the file.
class TensorSink {
 public:
  TensorSink(gguf::GgufWriter* w, Rng* rng) : w_(w), rng_(rng) {}

  Status Add(const std::string& name, std::vector<int64_t> ne, DType type, Init init,
             const ScaledRows& scaled = {}) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    const float fan_in = static_cast<float>(ne[0]);
    for (auto& v : values) {
      switch (init) {
        case Init::kMatrix: v = rng_->Normal() / std::sqrt(fan_in); break;
        case Init::kNorm: v = 1.0f + 0.1f * rng_->Normal(); break;
        case Init::kBias: v = 0.1f * rng_->Normal(); break;
        case Init::kPositional: v = 0.5f * rng_->Normal(); break;
      }
    }
    const int64_t scaled_len = ne.size() == 1 ? 1 : ne[0];  // an element, or a row
    for (int64_t r : scaled.rows) {
      for (int64_t i = 0; i < scaled_len; ++i) {
        values[static_cast<size_t>(r * scaled_len + i)] *= scaled.scale;
      }
    }
    const int64_t row_len = ne[0];
    auto row_bytes = RowBytes(type, row_len);
    if (!row_bytes) return InvalidArgumentError("tensor " + name + ": bad row length for type");
    auto& bytes = buffers_.emplace_back(static_cast<size_t>(*row_bytes * (n / row_len)));
    VLMD_ASSIGN_OR_RETURN(uint64_t written,
                          QuantizeTensor(type, values.data(), n / row_len, row_len, bytes.data()));
    (void)written;
    return w_->AddTensorView(name, type, ne, bytes);
  }

  // A 2-D weight [row_len, n_rows] in `wanted` type (or its fallback for this row length).
  Status AddMatrix(const std::string& name, int64_t row_len, int64_t n_rows, DType wanted,
                   const ScaledRows& scaled = {}) {
    bool fell_back = false;
    return Add(name, {row_len, n_rows}, TypeForRowLength(wanted, row_len, &fell_back),
               Init::kMatrix, scaled);
  }

  // The same for a mixture of experts' stacked matrices [row_len, n_rows, n_experts].
  Status AddExperts(const std::string& name, int64_t row_len, int64_t n_rows, int64_t n_experts,
                    DType wanted) {
    bool fell_back = false;
    return Add(name, {row_len, n_rows, n_experts}, TypeForRowLength(wanted, row_len, &fell_back),
               Init::kMatrix);
  }

 private:
  gguf::GgufWriter* w_;
  Rng* rng_;
  std::list<std::vector<uint8_t>> buffers_;  // stable addresses for AddTensorView
};

void SetCommonKeys(gguf::GgufWriter* w, const ModelPreset& p, const std::string& what,
                   DType type) {
  w->SetString("general.name", "vlmd-synthetic-" + p.name + "-" + what);
  w->SetString("general.description",
               "synthetic random-weight model generated by vlmd-synth; not a trained model");
  w->SetU32("general.file_type", GgufFileType(type));
  w->SetBool("vlmd.synthetic", true);
}

constexpr std::string_view kSmolVlmChatTemplate =
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// The keys every mmproj has: architecture, projector, the ViT's shape, and the image
// normalization (SigLIP-style 0.5 / 0.5, or OpenAI CLIP's mean and std).
void SetVisionKeys(gguf::GgufWriter* w, const ModelPreset& preset, const SynthOptions& opts,
                   std::string_view projector_type, bool half_normalization) {
  const VisionShape& v = preset.vision;
  w->SetString("general.architecture", "clip");
  w->SetString("general.type", "mmproj");
  SetCommonKeys(w, preset, "mmproj", opts.vision_type);
  w->SetBool("clip.has_vision_encoder", true);
  w->SetString("clip.projector_type", projector_type);
  w->SetU32("clip.vision.projection_dim", static_cast<uint32_t>(preset.text.d_model));
  w->SetU32("clip.vision.image_size", v.image_size);
  w->SetU32("clip.vision.patch_size", v.patch_size);
  w->SetU32("clip.vision.embedding_length", v.d_model);
  w->SetU32("clip.vision.feed_forward_length", v.d_ff);
  w->SetU32("clip.vision.block_count", v.n_layers);
  w->SetU32("clip.vision.attention.head_count", v.n_heads);
  w->SetF32("clip.vision.attention.layer_norm_epsilon", v.ln_eps);
  const std::vector<float> half = {0.5f, 0.5f, 0.5f};
  const std::vector<float> clip_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  const std::vector<float> clip_std = {0.26862954f, 0.26130258f, 0.27577711f};
  w->SetF32Array("clip.vision.image_mean", half_normalization ? half : clip_mean);
  w->SetF32Array("clip.vision.image_std", half_normalization ? half : clip_std);
}

// The Qwen VL mmproj (tensor and key names as llama.cpp's converter writes them; FAMILIES.md).
Status WriteQwenMmproj(const ModelPreset& preset, const SynthOptions& opts, const std::string& path) {
  const VisionShape& v = preset.vision;
  const bool v25 = v.projector == ProjectorKind::kQwen25vl;
  const bool v3 = v.projector == ProjectorKind::kQwen3vl;
  const int64_t d = v.d_model, d4 = 4 * v.d_model;
  const int64_t d_text = preset.text.d_model;
  gguf::GgufWriter w;
  SetVisionKeys(&w, preset, opts,
                v3 ? "qwen3vl_merger" : v25 ? "qwen2.5vl_merger" : "qwen2vl_merger", v3);
  if (v25) {
    w.SetBool("clip.use_silu", true);
    w.SetU32("clip.vision.n_wa_pattern", v.n_wa_pattern);
  }
  if (v3) {
    w.SetBool("clip.use_gelu", true);
    w.SetU32("clip.vision.spatial_merge_size", 2);
  }
  Rng rng(opts.seed ^ 0x5EED5EEDull);
  TensorSink sink(&w, &rng);
  const DType vt = opts.vision_type;
  for (const char* k : {"v.patch_embd.weight", "v.patch_embd.weight.1"}) {
    VLMD_RETURN_IF_ERROR(sink.Add(k, {v.patch_size, v.patch_size, 3, d}, DType::kF16, Init::kMatrix));
  }
  if (v3) {
    const int64_t side = v.image_size / v.patch_size;
    VLMD_RETURN_IF_ERROR(sink.Add("v.patch_embd.bias", {d}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(
        sink.Add("v.position_embd.weight", {d, side * side}, DType::kF32, Init::kPositional));
  }
  auto norm = [&](const std::string& name, int64_t n) -> Status {
    VLMD_RETURN_IF_ERROR(sink.Add(name + ".weight", {n}, DType::kF32, Init::kNorm));
    if (v25) return Status::Ok();  // RMSNorm: no bias
    return sink.Add(name + ".bias", {n}, DType::kF32, Init::kBias);
  };
  auto linear = [&](const std::string& name, int64_t k, int64_t n) -> Status {
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(name + ".weight", k, n, vt));
    return sink.Add(name + ".bias", {n}, DType::kF32, Init::kBias);
  };
  for (int32_t l = 0; l < v.n_layers; ++l) {
    const std::string b = "v.blk." + std::to_string(l) + ".";
    VLMD_RETURN_IF_ERROR(norm(b + "ln1", d));
    VLMD_RETURN_IF_ERROR(norm(b + "ln2", d));
    if (v3) {
      VLMD_RETURN_IF_ERROR(linear(b + "attn_qkv", d, 3 * d));
    } else {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) VLMD_RETURN_IF_ERROR(linear(b + m, d, d));
    }
    VLMD_RETURN_IF_ERROR(linear(b + "attn_out", d, d));
    VLMD_RETURN_IF_ERROR(linear(b + "ffn_up", d, v.d_ff));
    if (v25) VLMD_RETURN_IF_ERROR(linear(b + "ffn_gate", d, v.d_ff));
    VLMD_RETURN_IF_ERROR(linear(b + "ffn_down", v.d_ff, d));
  }
  for (int32_t l : v.deepstack_layers) {
    const std::string b = "v.deepstack." + std::to_string(l) + ".";
    VLMD_RETURN_IF_ERROR(sink.Add(b + "norm.weight", {d4}, DType::kF32, Init::kNorm));
    VLMD_RETURN_IF_ERROR(sink.Add(b + "norm.bias", {d4}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(linear(b + "fc1", d4, d4));
    VLMD_RETURN_IF_ERROR(linear(b + "fc2", d4, d_text));
  }
  VLMD_RETURN_IF_ERROR(norm("v.post_ln", d));
  VLMD_RETURN_IF_ERROR(linear("mm.0", d4, d4));
  VLMD_RETURN_IF_ERROR(linear("mm.2", d4, d_text));
  return w.WriteFile(path);
}

}  // namespace

Status WriteSyntheticText(const ModelPreset& preset, const SynthOptions& opts,
                          const std::string& path) {
  if (!FindQuantizeRowFn(opts.text_type)) {
    return InvalidArgumentError("cannot write text weights of type " +
                                std::string(DTypeName(opts.text_type)));
  }
  const TextShape& t = preset.text;
  const bool vlm = preset.vision.projector == ProjectorKind::kIdefics3;
  const bool qwen3vl = t.arch == "qwen3vl" || t.arch == "qwen3vlmoe";
  // qwen2 (Qwen2 / Qwen2.5 text, as InternVL ships it): the qwen2vl tensors without M-RoPE.
  const bool qwen = t.arch == "qwen2" || t.arch == "qwen2vl" || qwen3vl;
  if ((t.arch == "qwen3vlmoe") != (t.n_expert > 0) || t.n_expert_used > t.n_expert) {
    return InvalidArgumentError("text architecture '" + t.arch + "' with " +
                                std::to_string(t.n_expert) + " experts (" +
                                std::to_string(t.n_expert_used) + " used)");
  }
  const bool gemma3 = t.arch == "gemma3";
  if (!qwen && !gemma3 && t.arch != "llama") {
    return InvalidArgumentError("cannot write text architecture '" + t.arch + "'");
  }
  const SyntheticVocab vocab = BuildSyntheticVocab(
      t.n_vocab_base,
      vlm ? AddedTokens::kSmolVlm : qwen ? AddedTokens::kQwenVl : gemma3 ? AddedTokens::kGemma3 : AddedTokens::kNone,
      opts.seed);
  const int64_t n_vocab = static_cast<int64_t>(vocab.tokens.size());
  const int64_t head_dim = t.head_dim > 0 ? t.head_dim : t.d_model / t.n_heads;
  const int64_t q_dim = head_dim * t.n_heads;
  const int64_t kv_dim = head_dim * t.n_kv_heads;

  gguf::GgufWriter w;
  const std::string a = t.arch + ".";
  w.SetString("general.architecture", t.arch);
  SetCommonKeys(&w, preset, "text", opts.text_type);
  w.SetU32(a + "context_length", t.n_ctx);
  w.SetU32(a + "embedding_length", t.d_model);
  w.SetU32(a + "block_count", t.n_layers);
  w.SetU32(a + "feed_forward_length", t.d_ff);
  w.SetU32(a + "attention.head_count", t.n_heads);
  w.SetU32(a + "attention.head_count_kv", t.n_kv_heads);
  w.SetF32(a + "attention.layer_norm_rms_epsilon", t.rms_eps);
  w.SetF32(a + "rope.freq_base", t.rope_theta);
  w.SetU32(a + "rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.SetU32(a + "vocab_size", static_cast<uint32_t>(n_vocab));
  if (t.arch == "qwen2vl" || qwen3vl) {
    w.SetI32Array(a + "rope.dimension_sections", t.rope_sections);
  }
  if (qwen3vl) w.SetU32(a + "n_deepstack_layers", static_cast<uint32_t>(t.n_deepstack));
  if (t.n_expert > 0) {
    w.SetU32(a + "expert_count", static_cast<uint32_t>(t.n_expert));
    w.SetU32(a + "expert_used_count", static_cast<uint32_t>(t.n_expert_used));
    w.SetU32(a + "expert_feed_forward_length", static_cast<uint32_t>(t.d_ff_exp));
  }
  if (t.head_dim > 0) {
    w.SetU32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
    w.SetU32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
  }
  if (gemma3 && t.n_swa > 0) {
    w.SetU32(a + "attention.sliding_window", static_cast<uint32_t>(t.n_swa));
    w.SetU32(a + "attention.sliding_window_pattern", static_cast<uint32_t>(t.swa_pattern));
    w.SetF32(a + "rope.freq_base_swa", t.rope_theta_swa);
  }
  if (t.rope_scale != 1.0f) {
    w.SetString(a + "rope.scaling.type", "linear");
    w.SetF32(a + "rope.scaling.factor", t.rope_scale);
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", qwen ? "qwen2" : "smollm");
  w.SetStringArray("tokenizer.ggml.tokens", vocab.tokens);
  w.SetI32Array("tokenizer.ggml.token_type", vocab.token_types);
  w.SetStringArray("tokenizer.ggml.merges", vocab.merges);
  w.SetU32("tokenizer.ggml.bos_token_id", vocab.bos_id);
  w.SetU32("tokenizer.ggml.eos_token_id", vocab.eos_id);
  w.SetU32("tokenizer.ggml.unknown_token_id", vocab.unk_id);
  w.SetU32("tokenizer.ggml.padding_token_id", vocab.pad_id);
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  w.SetBool("tokenizer.ggml.add_eos_token", false);
  w.SetString("tokenizer.chat_template",
              vlm ? kSmolVlmChatTemplate : gemma3 ? std::string_view("gemma") : kChatMlTemplate);

  Rng rng(opts.seed);
  TensorSink sink(&w, &rng);
  const ScaledRows norm_outliers = OutlierRows(opts.outlier_channels, t.d_model, opts.outlier_scale);
  const ScaledRows ff_outliers = OutlierRows(opts.outlier_channels, t.d_ff, opts.outlier_scale);
  VLMD_RETURN_IF_ERROR(sink.AddMatrix("token_embd.weight", t.d_model, n_vocab, opts.text_type));
  for (int32_t l = 0; l < t.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_norm.weight", {t.d_model}, DType::kF32, Init::kNorm,
                                  norm_outliers));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "attn_q.weight", t.d_model, q_dim, opts.text_type));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "attn_k.weight", t.d_model, kv_dim, opts.text_type));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "attn_v.weight", t.d_model, kv_dim, opts.text_type));
    if (t.arch == "qwen2" || t.arch == "qwen2vl") {
      VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_q.bias", {q_dim}, DType::kF32, Init::kBias));
      VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_k.bias", {kv_dim}, DType::kF32, Init::kBias));
      VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_v.bias", {kv_dim}, DType::kF32, Init::kBias));
    }
    if (qwen3vl || gemma3) {
      VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_q_norm.weight", {head_dim}, DType::kF32, Init::kNorm));
      VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_k_norm.weight", {head_dim}, DType::kF32, Init::kNorm));
    }
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "attn_output.weight", q_dim, t.d_model, opts.text_type));
    if (gemma3) {
      VLMD_RETURN_IF_ERROR(sink.Add(b + "post_attention_norm.weight", {t.d_model}, DType::kF32, Init::kNorm));
      VLMD_RETURN_IF_ERROR(sink.Add(b + "post_ffw_norm.weight", {t.d_model}, DType::kF32, Init::kNorm));
    }
    VLMD_RETURN_IF_ERROR(sink.Add(b + "ffn_norm.weight", {t.d_model}, DType::kF32, Init::kNorm,
                                  norm_outliers));
    if (t.n_expert > 0) {  // the router stays f32, as llama.cpp's quantizer leaves it
      VLMD_RETURN_IF_ERROR(sink.Add(b + "ffn_gate_inp.weight", {t.d_model, t.n_expert}, DType::kF32,
                                    Init::kMatrix));
      for (const char* m : {"ffn_gate_exps", "ffn_up_exps"}) {
        VLMD_RETURN_IF_ERROR(
            sink.AddExperts(b + m + ".weight", t.d_model, t.d_ff_exp, t.n_expert, opts.text_type));
      }
      VLMD_RETURN_IF_ERROR(sink.AddExperts(b + "ffn_down_exps.weight", t.d_ff_exp, t.d_model,
                                           t.n_expert, opts.text_type));
      continue;
    }
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "ffn_gate.weight", t.d_model, t.d_ff, opts.text_type));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "ffn_up.weight", t.d_model, t.d_ff, opts.text_type,
                                        ff_outliers));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "ffn_down.weight", t.d_ff, t.d_model, opts.text_type));
  }
  VLMD_RETURN_IF_ERROR(sink.Add("output_norm.weight", {t.d_model}, DType::kF32, Init::kNorm));
  if (!t.tied_output) {
    VLMD_RETURN_IF_ERROR(sink.AddMatrix("output.weight", t.d_model, n_vocab, opts.text_type));
  }
  return w.WriteFile(path);
}

Status WriteSyntheticMmproj(const ModelPreset& preset, const SynthOptions& opts,
                            const std::string& path) {
  const VisionShape& v = preset.vision;
  if (v.projector == ProjectorKind::kNone) {
    return InvalidArgumentError("preset '" + preset.name + "' has no vision tower");
  }
  if (!FindQuantizeRowFn(opts.vision_type)) {
    return InvalidArgumentError("cannot write vision weights of type " +
                                std::string(DTypeName(opts.vision_type)));
  }
  if (v.projector == ProjectorKind::kQwen2vl || v.projector == ProjectorKind::kQwen25vl ||
      v.projector == ProjectorKind::kQwen3vl) {
    return WriteQwenMmproj(preset, opts, path);
  }
  const bool idefics3 = v.projector == ProjectorKind::kIdefics3;
  const bool internvl = v.projector == ProjectorKind::kInternvl;
  const bool gemma3 = v.projector == ProjectorKind::kGemma3;
  const bool siglip = idefics3 || gemma3;  // patch bias, no class token, post-LN, 0.5 / 0.5
  const int64_t grid = v.image_size / v.patch_size;
  const int64_t n_patches = grid * grid;
  const int64_t d_text = preset.text.d_model;

  gguf::GgufWriter w;
  SetVisionKeys(&w, preset, opts,
                idefics3 ? "idefics3" : internvl ? "internvl" : gemma3 ? "gemma3" : "mlp", siglip);
  w.SetBool("clip.use_gelu", true);
  if (idefics3) {
    w.SetU32("clip.vision.projector.scale_factor", v.scale_factor);
    w.SetU32("clip.vision.preproc_image_size", v.preproc_image_size);
  }
  if (internvl) {
    w.SetU32("clip.vision.projector.scale_factor", v.scale_factor);
    w.SetU32("clip.vision.preproc_min_tiles", 1);
    w.SetU32("clip.vision.preproc_max_tiles", static_cast<uint32_t>(v.max_tiles));
  }
  if (!v.grid_pinpoints.empty()) w.SetI32Array("clip.vision.image_grid_pinpoints", v.grid_pinpoints);
  if (v.feature_layer > 0) w.SetI32Array("clip.vision.feature_layer", std::vector<int32_t>{v.feature_layer});

  Rng rng(opts.seed ^ 0x5EED5EEDull);
  TensorSink sink(&w, &rng);
  const int64_t d = v.d_model;
  const DType vt = opts.vision_type;
  VLMD_RETURN_IF_ERROR(sink.Add("v.patch_embd.weight", {v.patch_size, v.patch_size, 3, d},
                                DType::kF32, Init::kMatrix));
  if (siglip) {
    VLMD_RETURN_IF_ERROR(sink.Add("v.patch_embd.bias", {d}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(
        sink.Add("v.position_embd.weight", {d, n_patches}, DType::kF32, Init::kPositional));
  } else if (internvl) {  // class token and patch bias, no pre-LN
    VLMD_RETURN_IF_ERROR(sink.Add("v.patch_embd.bias", {d}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(sink.Add("v.class_embd", {d}, DType::kF32, Init::kPositional));
    VLMD_RETURN_IF_ERROR(
        sink.Add("v.position_embd.weight", {d, n_patches + 1}, DType::kF32, Init::kPositional));
  } else {
    VLMD_RETURN_IF_ERROR(sink.Add("v.class_embd", {d}, DType::kF32, Init::kPositional));
    VLMD_RETURN_IF_ERROR(
        sink.Add("v.position_embd.weight", {d, n_patches + 1}, DType::kF32, Init::kPositional));
    VLMD_RETURN_IF_ERROR(sink.Add("v.pre_ln.weight", {d}, DType::kF32, Init::kNorm));
    VLMD_RETURN_IF_ERROR(sink.Add("v.pre_ln.bias", {d}, DType::kF32, Init::kBias));
  }
  for (int32_t l = 0; l < v.n_layers; ++l) {
    const std::string b = "v.blk." + std::to_string(l) + ".";
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + m + ".weight", d, d, vt));
      VLMD_RETURN_IF_ERROR(sink.Add(b + m + ".bias", {d}, DType::kF32, Init::kBias));
    }
    for (const char* ln : {"ln1", "ln2"}) {
      VLMD_RETURN_IF_ERROR(sink.Add(b + ln + ".weight", {d}, DType::kF32, Init::kNorm));
      if (!v.internvit_6b_blocks) {
        VLMD_RETURN_IF_ERROR(sink.Add(b + ln + ".bias", {d}, DType::kF32, Init::kBias));
      }
    }
    if (internvl && v.internvit_6b_blocks) {
      VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_q_norm.weight", {d}, DType::kF32, Init::kNorm));
      VLMD_RETURN_IF_ERROR(sink.Add(b + "attn_k_norm.weight", {d}, DType::kF32, Init::kNorm));
    }
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "ffn_up.weight", d, v.d_ff, vt));
    VLMD_RETURN_IF_ERROR(sink.Add(b + "ffn_up.bias", {v.d_ff}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix(b + "ffn_down.weight", v.d_ff, d, vt));
    VLMD_RETURN_IF_ERROR(sink.Add(b + "ffn_down.bias", {d}, DType::kF32, Init::kBias));
    if (internvl) {
      VLMD_RETURN_IF_ERROR(sink.Add(b + "ls1.weight", {d}, DType::kF32, Init::kNorm));
      VLMD_RETURN_IF_ERROR(sink.Add(b + "ls2.weight", {d}, DType::kF32, Init::kNorm));
    }
  }
  if (gemma3) {
    VLMD_RETURN_IF_ERROR(sink.Add("v.post_ln.weight", {d}, DType::kF32, Init::kNorm));
    VLMD_RETURN_IF_ERROR(sink.Add("v.post_ln.bias", {d}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(sink.Add("mm.soft_emb_norm.weight", {d}, DType::kF32, Init::kNorm));
    // Stored with rows of text width (ne [n_embd_text, D]), as the converter writes it.
    VLMD_RETURN_IF_ERROR(sink.AddMatrix("mm.input_projection.weight", d_text, d, vt));
  } else if (idefics3) {
    VLMD_RETURN_IF_ERROR(sink.Add("v.post_ln.weight", {d}, DType::kF32, Init::kNorm));
    VLMD_RETURN_IF_ERROR(sink.Add("v.post_ln.bias", {d}, DType::kF32, Init::kBias));
    const int64_t shuffled = d * v.scale_factor * v.scale_factor;
    VLMD_RETURN_IF_ERROR(sink.AddMatrix("mm.model.fc.weight", shuffled, d_text, vt));
  } else if (internvl) {
    const int64_t shuffled = d * v.scale_factor * v.scale_factor;
    VLMD_RETURN_IF_ERROR(sink.Add("mm.model.mlp.0.weight", {shuffled}, DType::kF32, Init::kNorm));
    VLMD_RETURN_IF_ERROR(sink.Add("mm.model.mlp.0.bias", {shuffled}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix("mm.model.mlp.1.weight", shuffled, d_text, vt));
    VLMD_RETURN_IF_ERROR(sink.Add("mm.model.mlp.1.bias", {d_text}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix("mm.model.mlp.3.weight", d_text, d_text, vt));
    VLMD_RETURN_IF_ERROR(sink.Add("mm.model.mlp.3.bias", {d_text}, DType::kF32, Init::kBias));
  } else {
    VLMD_RETURN_IF_ERROR(sink.AddMatrix("mm.0.weight", d, d_text, vt));
    VLMD_RETURN_IF_ERROR(sink.Add("mm.0.bias", {d_text}, DType::kF32, Init::kBias));
    VLMD_RETURN_IF_ERROR(sink.AddMatrix("mm.2.weight", d_text, d_text, vt));
    VLMD_RETURN_IF_ERROR(sink.Add("mm.2.bias", {d_text}, DType::kF32, Init::kBias));
  }
  return w.WriteFile(path);
}

}  // namespace vlmd::engine::synth
