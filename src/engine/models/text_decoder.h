// The llama-family text decoder (llama, SmolLM2, Qwen2, the Qwen VL decoders qwen2vl /
// qwen3vl, Gemma 3) as llama.cpp stores it in GGUF: token embedding, n_layers x [RMSNorm, GQA
// attention with RoPE (one position, or M-RoPE sections; qwen3vl, gemma3: q/k RMSNorm), RMSNorm,
// SwiGLU FFN (qwen3vl: + deepstack rows)], final RMSNorm and a separate or tied output head.
// Gemma 3 adds: token rows scaled by sqrt(d_model), queries scaled before attention, RMSNorm on
// each branch's output before its residual add, a GELU-gated FFN, sliding-window layers with
// their own RoPE base, optional logit soft-capping. Weights are zero-copy views into the mapped file;
// per-sequence state lives in KvCache, per-call scratch in ForwardContext.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/kv_cache.h"
#include "engine/models/matmul_observer.h"
#include "engine/models/moe_ffn.h"
#include "engine/models/text_config.h"
#include "engine/models/weights.h"
#include "engine/ops/attention.h"
#include "engine/ops/matmul.h"
#include "engine/ops/rope.h"

namespace vlmd::engine::models {

// One forward call: n_tokens rows, each a token id (or an injected embedding row, e.g. an image
// token) of sequence seq[i] in KV slot slot[i]. Rows of one sequence are contiguous in consecutive
// slots, and the first slot of a sequence's rows must not be past its cache's n_filled (no holes).
// The slot order is the causal order: a row sees its own sequence's slots up to its own. The RoPE
// position of a row is separate from its slot (M-RoPE advances an image by max(grid_w, grid_h)
// positions, not by its row count): rope_pos gives it, else it is the slot. All arrays are owned
// by the caller.
struct ForwardBatch {
  int64_t n_tokens = 0;
  const int32_t* tokens = nullptr;    // [n_tokens]; a negative id takes the embeddings row
  const float* embeddings = nullptr;  // [n_tokens, TextConfig::n_embd_inp()] or nullptr
  const int32_t* slot = nullptr;      // [n_tokens] KV cache rows
  const int32_t* seq = nullptr;       // [n_tokens], index into the caches span
  const int32_t* logit_rows = nullptr;  // rows whose logits are computed, ascending
  int64_t n_logit_rows = 0;
  // false: the caller checks each logit row itself (batched decode fails only the sequence whose
  // row is not finite; rows never mix across sequences).
  bool check_finite = true;
  // Prompt rows (prefill). In the fast precision their attention runs on the bf16 kernel (AMX,
  // AVX512-BF16, or FMAs on AVX-512 and AVX2) and on AMX their products on the tile unit,
  // whatever the number of rows (the int8 products are per row anyway), so that a prompt gives
  // the same numbers however it is cut into chunks; other rows (decode steps) keep the int8 and
  // f32 kernels, so that a sequence decodes the same in any batch.
  bool prompt = false;
  // RoPE positions: nullptr (position = slot), or rope_pos_per_row values per row: 1 (one
  // position; an M-RoPE model uses it for all four sections) or 4 ((t, h, w, e), M-RoPE models).
  const int32_t* rope_pos = nullptr;
  int32_t rope_pos_per_row = 1;
  // Rows that attend to each other in both directions (Gemma 3's image tokens): spans of batch
  // rows, each within one sequence's rows of this batch, so that all of a span is in the cache
  // when any of its rows attends (a prompt chunk must not cut one). A row of a span sees the
  // cache up to the span's last row; every other row stays causal.
  std::span<const ops::RowSpan> bidirectional{};
};

// What one decoder layer does where layers differ: the one stack (RMSNorm, GQA attention with
// RoPE, SwiGLU FFN) runs every architecture, and the family and the file set these per layer
// (Gemma 3's local layers: their own RoPE base and window).
struct DecoderLayerSpec {
  int32_t rope = 0;             // index into TextDecoder::rope_sets() (sets share n_rot)
  int32_t window = 0;           // > 0: sliding-window attention over this many positions
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (qwen3vl)
  int32_t deepstack_slice = 0;  // > 0: image rows add this slice of their embedding row after
                                // the layer (qwen3vl deepstack; text rows' slices are zero)
};

// Scratch buffers and execution resources of one caller (the scheduler thread). Buffers grow to
// the largest batch seen and are reused.
struct ForwardContext {
  const kernels::KernelTable* kernels = nullptr;
  ThreadPool* pool = nullptr;
  MatmulInputObserver* observer = nullptr;  // null: nothing observed (serving)
  ops::MatmulScratch matmul_scratch;
  std::vector<float> x, xn, q, k, v, qkv, attn, gate, up, logit_in;
  std::vector<float> rope_table;    // [rope sets][n_tokens, n_rot]
  std::vector<float> attention_kv;  // prefill attention's f32 K / V^T (ops::AttentionArgs)
  std::vector<int32_t> kv_pos;
  std::vector<int32_t> mask_pos;  // [n_tokens] causal-mask position of each row (bidirectional)
  std::vector<int32_t> ring_pos;  // a sliding-window ring's positions, per row
  MoeScratch moe;  // mixture-of-experts layers' routing and gathered rows
};

class TextDecoder {
 public:
  // Validates the config and every tensor's presence and shape. Keeps `file` alive. `packing`
  // repacks the matrices for the packed int8 matmul where it applies (ops::PackWeight). n_ctx:
  // the positions per sequence the caller will use (0: the training context); phi3 picks its
  // RoPE factors by it.
  static Result<std::unique_ptr<TextDecoder>> Load(std::shared_ptr<const gguf::GgufFile> file,
                                                  const ops::WeightPacking& packing = {},
                                                  int32_t n_ctx = 0);

  const TextConfig& config() const { return config_; }
  // A cache for one sequence of up to n_ctx positions. max_batch_rows > 0: no forward call
  // will add more rows than this to it at once, so a sliding-window layer keeps a ring of
  // window + max_batch_rows rows (Gemma 3) instead of n_ctx; 0: every layer keeps n_ctx.
  std::unique_ptr<KvCache> NewCache(int32_t n_ctx, int32_t max_batch_rows = 0) const;
  // Bytes NewCache(n_ctx, max_batch_rows) allocates.
  uint64_t KvCacheBytes(int32_t n_ctx, int32_t max_batch_rows = 0) const {
    return KvCache::BytesFor(config_.n_layers, n_ctx, config_.kv_dim(), LayerRows(max_batch_rows));
  }
  // Rows each layer's cache keeps for max_batch_rows (0 for every layer: all positions).
  std::vector<int32_t> LayerRows(int32_t max_batch_rows) const;
  // Bytes of weight data this model reads per token (all matrices once).
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Matrices repacked for the packed int8 matmul at load (0: all run on the GGUF rows).
  size_t packed_matrices() const { return packed_.size(); }
  // Memory the weights hold: the mapped GGUF file, less the pages of rows that packed copies
  // replaced (released at load), plus the packed copies. The released pages leave this
  // process's resident set; the kernel may keep them in its (reclaimable) page cache.
  uint64_t memory_bytes() const {
    return file_->file_size() - released_bytes_ + ops::PackedBytes(packed_);
  }
  uint64_t released_bytes() const { return released_bytes_; }
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }
  ops::PackingSummary packing() const { return ops::SummarizePacking(packed_); }

  // Runs the batch, appends K/V to the sequences' caches, and writes logits
  // [n_logit_rows, n_vocab] (row-major) for the requested rows.
  // INVALID_ARGUMENT for malformed batches (bad token id, position hole, unknown seq),
  // RESOURCE_EXHAUSTED when a position does not fit the cache, INTERNAL when a NaN/Inf appears
  // in the logits (SPEC E7).
  Status Forward(const ForwardBatch& batch, std::span<KvCache* const> caches,
                 ForwardContext* ctx, float* logits) const;

  // The f32 embedding of `token` into out[0 .. d_model).
  Status EmbedToken(int32_t token, float* out) const;

  // Per layer: what it does beyond the shared stack; the RoPE parameter sets the layers name.
  const DecoderLayerSpec& layer_spec(int32_t l) const { return layers_[static_cast<size_t>(l)].spec; }
  const std::vector<ops::RopeParams>& rope_sets() const { return rope_sets_; }

 private:
  struct Layer {
    DecoderLayerSpec spec;
    F32Weights attn_norm, ffn_norm;          // [d_model]
    ops::WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
    // Packed fusions (packed == nullptr when not fused): [q | k | v] and [gate | up] outputs from
    // one matmul each, so decode pays one activation quantization and one thread hand-off
    // instead of three / two. When set, the parts above keep only their GGUF rows.
    ops::WeightView wqkv, w_gate_up;
    F32Weights bq, bk, bv;                   // optional (qwen2 / qwen2vl have them)
    F32Weights q_norm, k_norm;               // [head_dim] when spec.qk_norm
    F32Weights post_attn_norm, post_ffn_norm;          // [d_model], Gemma 3
    MoeWeights moe;  // TextConfig::n_expert > 0: the FFN (w_gate, w_up, w_down unused)
    // GGUF names by shared input, for MatmulInputObserver: {q, k, v}, {o}, {gate, up}, {down};
    // a MoE layer's {router} and no down (its experts' names are in `moe`).
    std::vector<std::string> names_qkv, names_o, names_gate_up, names_down;
  };

  TextDecoder() = default;
  static Status LoadQkv(const gguf::GgufFile& f, const TextConfig& c, const std::string& p, Layer* L);
  static Status LoadExperts(const gguf::GgufFile& f, const TextConfig& c, const std::string& p,
                            const ops::WeightPacking& packing, Layer* L, ops::PackedStore* store,
                            uint64_t* expert_bytes, uint64_t* released_bytes);
  // Attention of layer `layer`; mask_pos [n_tokens]: each row's causal-mask position (its slot,
  // or its bidirectional span's last slot).
  Status Attend(const ForwardBatch& b, std::span<KvCache* const> caches, int32_t layer,
                const int32_t* mask_pos, ForwardContext* ctx) const;

  std::shared_ptr<const gguf::GgufFile> file_;
  TextConfig config_;
  ops::WeightView token_embd_;
  ops::WeightView output_;  // token_embd_ when tied
  F32Weights output_norm_;
  std::vector<Layer> layers_;
  std::vector<ops::RopeParams> rope_sets_;  // one table per set and batch (DecoderLayerSpec::rope)
  // llama's optional rope_freqs.weight, or phi3's long or short factors [n_rot / 2]
  F32Weights rope_freq_factors_;
  uint64_t weight_bytes_ = 0;
  uint64_t released_bytes_ = 0;  // mapped pages dropped after packing (GgufFile::ReleasePages)
  ops::PackedStore packed_;  // owns what the views' `packed` point at
  // Fast precision: prompt rows' attention runs in bf16 on the tile unit where the kernel table
  // has it (ops::AttentionArgs::bf16_tiles).
  bool bf16_attention_ = false;
};

}  // namespace vlmd::engine::models
