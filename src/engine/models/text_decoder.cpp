// llama-family forward pass (see text_decoder.h). Numerics follow llama.cpp's CPU backend where it
// matters for parity: activations are converted to each weight type's activation format inside
// MatMul, K/V are stored as F16, and Q is rounded to F16 before the K.Q products (what
// llama.cpp's flash-attention path does); accumulation is f32 throughout.
#include "engine/models/text_decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/kernels/packed_int8.h"
#include "engine/models/weights.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/norm.h"
#include "engine/ops/numerics.h"
#include "engine/ops/rope.h"
#include "engine/tensor/fp16.h"

namespace vlmd::engine::models {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// x[i] += y[i]
void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void AddBias(float* x, const F32Weights& bias, int64_t n_rows) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t r = 0; r < n_rows; ++r) AddInPlace(x + r * n, bias.data(), n);
}

// Rows [q | k | v] of a fused projection into the three row-major arrays.
void SplitQkv(const float* qkv, int64_t n, int64_t qd, int64_t kvd, float* q, float* k, float* v) {
  const int64_t w = qd + 2 * kvd;
  for (int64_t r = 0; r < n; ++r) {
    std::copy_n(qkv + r * w, qd, q + r * qd);
    std::copy_n(qkv + r * w + qd, kvd, k + r * kvd);
    std::copy_n(qkv + r * w + qd + kvd, kvd, v + r * kvd);
  }
}

}  // namespace

// q, k and v of layer prefix `p` (and their optional biases) from one fused attn_qkv (rows
// [q | k | v]) or three tensors, whichever the file has, as llama.cpp's create_tensor_qkv takes
// them for every architecture vlmd runs.
Status TextDecoder::LoadQkv(const gguf::GgufFile& f, const TextConfig& c, const std::string& p,
                            Layer* L) {
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  if (f.FindTensor(p + "attn_qkv.weight") == nullptr) {
    L->names_qkv = {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"};
    VLMD_ASSIGN_OR_RETURN(L->wq, GetMatrix(f, p + "attn_q.weight", c.d_model, qd));
    VLMD_ASSIGN_OR_RETURN(L->wk, GetMatrix(f, p + "attn_k.weight", c.d_model, kvd));
    VLMD_ASSIGN_OR_RETURN(L->wv, GetMatrix(f, p + "attn_v.weight", c.d_model, kvd));
    VLMD_ASSIGN_OR_RETURN(L->bq, GetOptionalF32(f, p + "attn_q.bias", {qd}));
    VLMD_ASSIGN_OR_RETURN(L->bk, GetOptionalF32(f, p + "attn_k.bias", {kvd}));
    VLMD_ASSIGN_OR_RETURN(L->bv, GetOptionalF32(f, p + "attn_v.bias", {kvd}));
    return Status::Ok();
  }
  L->names_qkv = {p + "attn_qkv.weight"};
  VLMD_ASSIGN_OR_RETURN(const ops::WeightView qkv,
                        GetMatrix(f, p + "attn_qkv.weight", c.d_model, qd + 2 * kvd));
  L->wq = RowsOf(qkv, 0, qd);
  L->wk = RowsOf(qkv, qd, kvd);
  L->wv = RowsOf(qkv, qd + kvd, kvd);
  VLMD_ASSIGN_OR_RETURN(const F32Weights b, GetOptionalF32(f, p + "attn_qkv.bias", {qd + 2 * kvd}));
  if (!b.empty()) {
    L->bq.assign(b.begin(), b.begin() + qd);
    L->bk.assign(b.begin() + qd, b.begin() + qd + kvd);
    L->bv.assign(b.begin() + qd + kvd, b.end());
  }
  return Status::Ok();
}

// The mixture-of-experts FFN of layer prefix `p` (moe_ffn.h): the router kept in its GGUF rows,
// each expert's gate and up packed as one fusion and its down projection packed where `packing`
// packs (then their GGUF pages released). Adds the experts' bytes to *expert_bytes.
Status TextDecoder::LoadExperts(const gguf::GgufFile& f, const TextConfig& c, const std::string& p,
                                const ops::WeightPacking& packing, Layer* L, ops::PackedStore* store,
                                uint64_t* expert_bytes, uint64_t* released_bytes) {
  const int64_t d = c.d_model, ff = c.d_ff_exp, n_expert = c.n_expert;
  MoeWeights& moe = L->moe;
  moe.n_used = c.n_expert_used;
  moe.d_ff = ff;
  L->names_gate_up = {p + "ffn_gate_inp.weight"};  // the router's input; experts: ObserveExperts
  L->names_down.clear();
  moe.names_gate_up = {p + "ffn_gate_exps.weight", p + "ffn_up_exps.weight"};
  moe.names_down = {p + "ffn_down_exps.weight"};
  VLMD_ASSIGN_OR_RETURN(moe.router, GetMatrix(f, p + "ffn_gate_inp.weight", d, n_expert));
  VLMD_ASSIGN_OR_RETURN(const ops::WeightView gate, GetExpertMatrices(f, p + "ffn_gate_exps.weight", d, ff, n_expert));
  VLMD_ASSIGN_OR_RETURN(const ops::WeightView up, GetExpertMatrices(f, p + "ffn_up_exps.weight", d, ff, n_expert));
  VLMD_ASSIGN_OR_RETURN(const ops::WeightView down, GetExpertMatrices(f, p + "ffn_down_exps.weight", ff, d, n_expert));
  for (int64_t e = 0; e < n_expert; ++e) {
    moe.gate.push_back(RowsOf(gate, e * ff, ff));
    moe.up.push_back(RowsOf(up, e * ff, ff));
    moe.down.push_back(RowsOf(down, e * d, d));
    const ops::WeightView* parts[] = {&moe.gate.back(), &moe.up.back()};
    VLMD_ASSIGN_OR_RETURN(ops::WeightView fused, ops::PackFusedWeights(packing, parts, store));
    if (fused.packed) {
      *expert_bytes += fused.packed->bytes();
      for (const ops::WeightView* w : parts) *released_bytes += ReleaseRows(f, *w);
    } else {
      for (ops::WeightView* w : {&moe.gate.back(), &moe.up.back()}) {
        VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, w, store));
        *expert_bytes += w->packed ? w->packed->bytes() : w->row_bytes * static_cast<uint64_t>(w->n);
        *released_bytes += ReleasePackedRows(f, *w);
      }
    }
    moe.gate_up.push_back(fused);
    VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, &moe.down.back(), store));
    const ops::WeightView& dw = moe.down.back();
    *expert_bytes += dw.packed ? dw.packed->bytes() : dw.row_bytes * static_cast<uint64_t>(dw.n);
    *released_bytes += ReleasePackedRows(f, dw);
  }
  return Status::Ok();
}

Result<std::unique_ptr<TextDecoder>> TextDecoder::Load(std::shared_ptr<const gguf::GgufFile> file,
                                                     const ops::WeightPacking& packing, int32_t n_ctx) {
  std::unique_ptr<TextDecoder> m(new TextDecoder());
  m->file_ = std::move(file);
  m->bf16_attention_ = packing.precision == ops::Precision::kFast;
  const gguf::GgufFile& f = *m->file_;
  VLMD_ASSIGN_OR_RETURN(m->config_, ReadTextConfig(f));
  const TextConfig& c = m->config_;
  VLMD_ASSIGN_OR_RETURN(m->token_embd_, GetMatrix(f, "token_embd.weight", c.d_model, c.n_vocab));
  VLMD_ASSIGN_OR_RETURN(m->output_norm_, GetF32(f, "output_norm.weight", {c.d_model}));
  const bool tied = f.FindTensor("output.weight") == nullptr;
  if (tied && c.untied_head) {  // llama.cpp requires it too: no tied head for this family
    return InvalidArgumentError("output.weight missing: a " + c.arch + " model has a head of its own");
  }
  if (!tied) {
    VLMD_ASSIGN_OR_RETURN(m->output_, GetMatrix(f, "output.weight", c.d_model, c.n_vocab));
  } else {
    m->output_ = m->token_embd_;  // tied head (SmolLM2)
  }
  uint64_t bytes = m->output_.row_bytes * static_cast<uint64_t>(m->output_.n);
  m->rope_sets_ = {ops::RopeParams{.n_rot = c.n_rot, .freq_base = c.rope_theta,
                                   .freq_scale = c.rope_freq_scale, .neox = c.rope_neox,
                                   .attn_factor = c.rope_attn_factor,
                                   .sections = c.rope_sections,
                                   .interleaved = c.rope_interleaved}};
  // Llama 3.1-style RoPE scaling: a per-frequency divisor for every layer, which llama.cpp's
  // llama architecture loads when the file has it (a LLaVA on Llama 3.1 decoded otherwise).
  if (c.arch == "llama") {
    VLMD_ASSIGN_OR_RETURN(m->rope_freq_factors_, GetOptionalF32(f, "rope_freqs.weight", {c.n_rot / 2}));
  } else if (c.phi3) {
    // LongRoPE (llama_model::get_rope_factors): the long factors for sequences past the
    // original context, the short ones otherwise; either may be absent (Phi-3-mini-4k has none).
    // llama.cpp compares the context padded to a multiple of 256 (llama_context's n_ctx), so
    // the same --ctx-size picks the same factors here.
    const int64_t n_ctx_seq = (int64_t{n_ctx > 0 ? n_ctx : c.n_ctx_train} + 255) / 256 * 256;
    VLMD_ASSIGN_OR_RETURN(F32Weights long_factors,
                          GetOptionalF32(f, "rope_factors_long.weight", {c.n_rot / 2}));
    VLMD_ASSIGN_OR_RETURN(F32Weights short_factors,
                          GetOptionalF32(f, "rope_factors_short.weight", {c.n_rot / 2}));
    m->rope_freq_factors_ = n_ctx_seq > c.n_ctx_orig ? std::move(long_factors) : std::move(short_factors);
  }
  if (!m->rope_freq_factors_.empty()) m->rope_sets_[0].freq_factors = m->rope_freq_factors_.data();
  if (c.n_swa > 0) {  // Gemma 3's local layers: their own base, no frequency scaling
    m->rope_sets_.push_back(ops::RopeParams{.n_rot = c.n_rot, .freq_base = c.rope_theta_swa,
                                            .freq_scale = 1.0f, .neox = c.rope_neox,
                                            .attn_factor = c.rope_attn_factor});
  }
  m->layers_.resize(c.n_layers);
  uint64_t expert_bytes = 0;  // all experts' matrices; a token reads n_expert_used of n_expert
  for (int32_t l = 0; l < c.n_layers; ++l) {
    Layer& L = m->layers_[l];
    const bool swa = c.is_swa_layer(l);
    L.spec = DecoderLayerSpec{.rope = swa ? 1 : 0, .window = swa ? c.n_swa : 0, .qk_norm = c.qk_norm,
                              .deepstack_slice = l < c.n_deepstack ? l + 1 : 0};
    const std::string p = "blk." + std::to_string(l) + ".";
    VLMD_ASSIGN_OR_RETURN(L.attn_norm, GetF32(f, p + "attn_norm.weight", {c.d_model}));
    VLMD_ASSIGN_OR_RETURN(L.ffn_norm, GetF32(f, p + "ffn_norm.weight", {c.d_model}));
    L.names_o = {p + "attn_output.weight"};
    L.names_down = {p + "ffn_down.weight"};
    VLMD_RETURN_IF_ERROR(LoadQkv(f, c, p, &L));
    VLMD_ASSIGN_OR_RETURN(L.wo, GetMatrix(f, p + "attn_output.weight", c.q_dim(), c.d_model));
    if (c.n_expert > 0) {
      VLMD_RETURN_IF_ERROR(LoadExperts(f, c, p, packing, &L, &m->packed_, &expert_bytes,
                                       &m->released_bytes_));
      bytes += L.moe.router.row_bytes * static_cast<uint64_t>(L.moe.router.n);  // read every token
    } else if (c.phi3) {  // ffn_up = [gate | up] (llama.cpp's LLM_FFN_SWIGLU: SiLU of the first half)
      L.names_gate_up = {p + "ffn_up.weight"};
      VLMD_ASSIGN_OR_RETURN(const ops::WeightView gate_up,
                            GetMatrix(f, p + "ffn_up.weight", c.d_model, 2 * int64_t{c.d_ff}));
      L.w_gate = RowsOf(gate_up, 0, c.d_ff);
      L.w_up = RowsOf(gate_up, c.d_ff, c.d_ff);
    } else {
      L.names_gate_up = {p + "ffn_gate.weight", p + "ffn_up.weight"};
      VLMD_ASSIGN_OR_RETURN(L.w_gate, GetMatrix(f, p + "ffn_gate.weight", c.d_model, c.d_ff));
      VLMD_ASSIGN_OR_RETURN(L.w_up, GetMatrix(f, p + "ffn_up.weight", c.d_model, c.d_ff));
    }
    if (c.n_expert == 0) {
      VLMD_ASSIGN_OR_RETURN(L.w_down, GetMatrix(f, p + "ffn_down.weight", c.d_ff, c.d_model));
    }
    if (L.spec.qk_norm) {
      VLMD_ASSIGN_OR_RETURN(L.q_norm, GetF32(f, p + "attn_q_norm.weight", {c.head_dim}));
      VLMD_ASSIGN_OR_RETURN(L.k_norm, GetF32(f, p + "attn_k_norm.weight", {c.head_dim}));
    }
    if (c.gemma3) {
      VLMD_ASSIGN_OR_RETURN(L.post_attn_norm, GetF32(f, p + "post_attention_norm.weight", {c.d_model}));
      VLMD_ASSIGN_OR_RETURN(L.post_ffn_norm, GetF32(f, p + "post_ffw_norm.weight", {c.d_model}));
    }
    const ops::WeightView* qkv[] = {&L.wq, &L.wk, &L.wv};
    const ops::WeightView* gate_up[] = {&L.w_gate, &L.w_up};
    VLMD_ASSIGN_OR_RETURN(L.wqkv, ops::PackFusedWeights(packing, qkv, &m->packed_));
    std::vector<ops::WeightView*> singles = {&L.wo};
    if (c.n_expert == 0) {
      VLMD_ASSIGN_OR_RETURN(L.w_gate_up, ops::PackFusedWeights(packing, gate_up, &m->packed_));
      singles.push_back(&L.w_down);
    }
    // A matrix that now runs from its packed copy never reads its GGUF rows again: drop their
    // pages, so that resident memory holds each weight once.
    if (L.wqkv.packed) {
      bytes += L.wqkv.packed->bytes();
      for (const ops::WeightView* w : qkv) m->released_bytes_ += ReleaseRows(f, *w);
    } else {
      singles.insert(singles.end(), {&L.wq, &L.wk, &L.wv});
    }
    if (L.w_gate_up.packed) {
      bytes += L.w_gate_up.packed->bytes();
      for (const ops::WeightView* w : gate_up) m->released_bytes_ += ReleaseRows(f, *w);
    } else if (c.n_expert == 0) {
      singles.insert(singles.end(), {&L.w_gate, &L.w_up});
    }
    for (ops::WeightView* w : singles) {
      VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, w, &m->packed_));
      bytes += w->packed ? w->packed->bytes() : w->row_bytes * static_cast<uint64_t>(w->n);
      m->released_bytes_ += ReleasePackedRows(f, *w);
    }
  }
  // The head is packed on its own: a tied head keeps token_embd_ in GGUF rows for the lookup.
  VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, &m->output_, &m->packed_));
  if (m->output_.packed) {
    bytes += m->output_.packed->bytes() - m->output_.row_bytes * static_cast<uint64_t>(m->output_.n);
    if (!tied) m->released_bytes_ += ReleasePackedRows(f, m->output_);  // tied: still the lookup table
  }
  if (c.n_expert > 0) bytes += expert_bytes / static_cast<uint64_t>(c.n_expert) * c.n_expert_used;
  m->weight_bytes_ = bytes;
  VLMD_RETURN_IF_ERROR(RefuseUnusedTensors(f, "text model"));
  return m;
}

std::vector<int32_t> TextDecoder::LayerRows(int32_t max_batch_rows) const {
  std::vector<int32_t> rows(static_cast<size_t>(config_.n_layers), 0);
  if (max_batch_rows <= 0) return rows;
  for (int32_t l = 0; l < config_.n_layers; ++l) {
    // A query sees window - 1 earlier positions; the call's own rows are written before its
    // queries attend, so the ring must hold them and the window of the first one.
    const int32_t window = layers_[static_cast<size_t>(l)].spec.window;
    if (window > 0) rows[static_cast<size_t>(l)] = window + max_batch_rows;
  }
  return rows;
}

std::unique_ptr<KvCache> TextDecoder::NewCache(int32_t n_ctx, int32_t max_batch_rows) const {
  return std::make_unique<KvCache>(config_.n_layers, n_ctx, config_.kv_dim(), LayerRows(max_batch_rows));
}

Status TextDecoder::EmbedToken(int32_t token, float* out) const {
  if (token < 0 || token >= config_.n_vocab) {
    return InvalidArgumentError("token id " + std::to_string(token) + " outside the vocabulary [0, " +
                                std::to_string(config_.n_vocab) + ")");
  }
  return DequantizeMatrixRow(token_embd_, token, out);
}

Status TextDecoder::Attend(const ForwardBatch& b, std::span<KvCache* const> caches, int32_t layer,
                           const int32_t* mask_pos,
                          ForwardContext* ctx) const {
  const TextConfig& c = config_;
  const int64_t kv_dim = c.kv_dim();
  int64_t r0 = 0;
  while (r0 < b.n_tokens) {
    const int32_t s = b.seq[r0];
    int64_t r1 = r0 + 1;
    while (r1 < b.n_tokens && b.seq[r1] == s) ++r1;
    KvCache& cache = *caches[s];
    // Append this group's K/V rows at their positions (F16, as llama.cpp's cache); a ring
    // layer (sliding window) at position % rows.
    uint16_t* kc = cache.k(layer);
    uint16_t* vc = cache.v(layer);
    const kernels::ConvertRowFn to_f16 = ctx->kernels->convert_act[static_cast<int>(DType::kF16)];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = cache.row_of(layer, b.slot[r]);
      if (to_f16 != nullptr) {  // SIMD; round to nearest even as F32ToF16
        to_f16(ctx->k.data() + r * kv_dim, kc + p * kv_dim, kv_dim);
        to_f16(ctx->v.data() + r * kv_dim, vc + p * kv_dim, kv_dim);
        continue;
      }
      for (int64_t i = 0; i < kv_dim; ++i) {
        kc[p * kv_dim + i] = F32ToF16(ctx->k[r * kv_dim + i]);
        vc[p * kv_dim + i] = F32ToF16(ctx->v[r * kv_dim + i]);
      }
    }
    ops::AttentionArgs a;
    a.q = ctx->q.data() + r0 * c.q_dim();
    a.k = kc;
    a.v = vc;
    a.kv_type = DType::kF16;
    a.out = ctx->attn.data() + r0 * c.q_dim();
    a.n_q = r1 - r0;
    a.n_kv = b.slot[r1 - 1] + 1;
    const int32_t* kv_pos = ctx->kv_pos.data();
    if (cache.ring(layer) && a.n_kv > cache.rows(layer)) {
      // Ring rows hold the last rows(layer) positions up to the newest, P: row j holds the
      // largest position <= P that is j modulo rows (unsorted: the attention masks each).
      const int32_t rows = cache.rows(layer), last = b.slot[r1 - 1];
      ctx->ring_pos.resize(static_cast<size_t>(rows));
      for (int32_t j = 0; j < rows; ++j) ctx->ring_pos[static_cast<size_t>(j)] = last - (last - j) % rows;
      a.n_kv = rows;
      kv_pos = ctx->ring_pos.data();
    }
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    // Gemma 3's queries were scaled before (in f32, as llama.cpp scales them before attention).
    a.scale = c.attn_scale > 0.0f ? 1.0f : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.causal = true;
    a.q_pos = mask_pos + r0;
    const int32_t window = layers_[static_cast<size_t>(layer)].spec.window;
    if (window > 0) {
      a.window = window;
      a.q_win_pos = b.slot + r0;  // the window runs back from each row's own position
    }
    a.kv_pos = kv_pos;
    a.kv_scratch = &ctx->attention_kv;
    a.bf16_tiles = bf16_attention_ && b.prompt;
    VLMD_RETURN_IF_ERROR(ops::Attention(*ctx->kernels, ctx->pool, a));
    r0 = r1;
  }
  return Status::Ok();
}

Status TextDecoder::Forward(const ForwardBatch& b, std::span<KvCache* const> caches,
                           ForwardContext* ctx, float* logits) const {
  const TextConfig& c = config_;
  const int64_t n = b.n_tokens;
  if (n <= 0 || b.tokens == nullptr || b.slot == nullptr || b.seq == nullptr) {
    return InvalidArgumentError("empty or incomplete forward batch");
  }
  if (b.rope_pos != nullptr && b.rope_pos_per_row != 1 &&
      !(b.rope_pos_per_row == 4 && c.multi_rope())) {
    return InvalidArgumentError("forward batch: " + std::to_string(b.rope_pos_per_row) +
                                " RoPE positions per row for a model with " +
                                (c.multi_rope() ? "M-RoPE (1 or 4)" : "one position (1)"));
  }
  // Validate the batch against the caches before touching any state.
  for (int64_t r = 0; r < n; ++r) {
    const int32_t s = b.seq[r];
    if (s < 0 || s >= static_cast<int32_t>(caches.size()) || caches[s] == nullptr) {
      return InvalidArgumentError("batch row " + std::to_string(r) + " names unknown sequence " +
                                  std::to_string(s));
    }
    const KvCache& cache = *caches[s];
    const bool first = r == 0 || b.seq[r - 1] != s;
    if (first ? b.slot[r] > cache.n_filled() || b.slot[r] < 0 : b.slot[r] != b.slot[r - 1] + 1) {
      return InvalidArgumentError("batch row " + std::to_string(r) + ": slot " +
                                  std::to_string(b.slot[r]) + " leaves a hole in sequence " +
                                  std::to_string(s));
    }
    if (b.slot[r] >= cache.n_ctx()) {
      return ResourceExhaustedError("context of " + std::to_string(cache.n_ctx()) +
                                    " positions is full");
    }
    // A ring row holds the newest position that maps to it: restarting below n_filled would
    // leave rows of later positions labelled as earlier ones.
    if (first && b.slot[r] < cache.n_filled()) {
      for (int32_t l = 0; l < c.n_layers; ++l) {
        if (cache.ring(l)) {
          return InvalidArgumentError("batch row " + std::to_string(r) + " restarts sequence " +
                                      std::to_string(s) + " below its filled positions, which its "
                                      "sliding-window rings cannot take back");
        }
      }
    }
    // A ring layer holds its window and the call's rows: more rows at once would overwrite
    // positions the first of them still sees.
    const bool last_of_seq = r + 1 == n || b.seq[r + 1] != s;
    if (last_of_seq) {
      int64_t first = r;
      while (first > 0 && b.seq[first - 1] == s) --first;
      for (int32_t l = 0; l < c.n_layers; ++l) {
        const int32_t window = layers_[static_cast<size_t>(l)].spec.window;
        if (cache.ring(l) && r - first + 1 + window > cache.rows(l)) {
          return InvalidArgumentError("batch of " + std::to_string(r - first + 1) +
                                      " rows for one sequence exceeds its sliding-window cache of " +
                                      std::to_string(cache.rows(l)) + " rows");
        }
      }
    }
    if (b.tokens[r] < 0 && b.embeddings == nullptr) {
      return InvalidArgumentError("batch row " + std::to_string(r) + " has no token and no embedding");
    }
  }
  for (int64_t i = 0; i < b.n_logit_rows; ++i) {
    if (b.logit_rows == nullptr || b.logit_rows[i] < 0 || b.logit_rows[i] >= n) {
      return InvalidArgumentError("logit row outside the batch");
    }
  }
  // The causal mask's position of each row: its slot, raised to the last slot of its
  // bidirectional span (the span's rows are consecutive slots of one sequence, so "kv slot <=
  // the span's last slot" is "causal, or inside the span").
  const int32_t* mask_pos = b.slot;
  if (!b.bidirectional.empty()) {
    ctx->mask_pos.assign(b.slot, b.slot + n);
    for (const ops::RowSpan& span : b.bidirectional) {
      const int64_t last = span.start + span.len - 1;
      if (span.start < 0 || span.len < 1 || last >= n ||
          std::any_of(b.seq + span.start, b.seq + last + 1,
                      [&](int32_t s) { return s != b.seq[span.start]; })) {
        return InvalidArgumentError("bidirectional span [" + std::to_string(span.start) + ", +" +
                                    std::to_string(span.len) +
                                    ") is not inside one sequence's rows of the batch");
      }
      for (int64_t r = span.start; r <= last; ++r) ctx->mask_pos[r] = b.slot[last];
    }
    mask_pos = ctx->mask_pos.data();
  }
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.d_ff;
  Grow(ctx->x, n * d);
  Grow(ctx->xn, n * d);
  Grow(ctx->q, n * qd);
  Grow(ctx->k, n * kvd);
  Grow(ctx->v, n * kvd);
  Grow(ctx->attn, n * std::max(qd, d));
  const int64_t dense_ff = c.n_expert > 0 ? 0 : ff;  // a MoE's experts have buffers of their own
  Grow(ctx->gate, n * dense_ff);
  Grow(ctx->up, n * 2 * dense_ff);  // the fused [gate | up] output when w_gate_up is packed
  Grow(ctx->qkv, n * (qd + 2 * kvd));
  Grow(ctx->rope_table, static_cast<int64_t>(rope_sets_.size()) * n * c.n_rot);
  int32_t max_ctx = 0;
  for (KvCache* cache : caches) {
    if (cache) max_ctx = std::max(max_ctx, cache->n_ctx());
  }
  if (static_cast<int32_t>(ctx->kv_pos.size()) < max_ctx) {
    ctx->kv_pos.resize(max_ctx);
    std::iota(ctx->kv_pos.begin(), ctx->kv_pos.end(), 0);
  }
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  // [n, d_model] each: the residual stream and a block's normalized input. The two buffers swap
  // roles at each residual add (matmul_add_to_x).
  float* x = ctx->x.data();
  float* xn = ctx->xn.data();

  const int64_t w_inp = c.n_embd_inp();  // an embedding row: [main | deepstack slices]
  const float embd_scale = c.gemma3 ? std::sqrt(static_cast<float>(d)) : 1.0f;  // token rows only
  for (int64_t r = 0; r < n; ++r) {
    if (b.tokens[r] >= 0) {
      VLMD_RETURN_IF_ERROR(EmbedToken(b.tokens[r], x + r * d));
      if (embd_scale != 1.0f) {
        for (int64_t i = 0; i < d; ++i) x[r * d + i] *= embd_scale;
      }
    } else {
      std::copy_n(b.embeddings + r * w_inp, d, x + r * d);
    }
  }
  for (size_t i = 0; i < rope_sets_.size(); ++i) {
    VLMD_RETURN_IF_ERROR(ops::BuildRopeTable(rope_sets_[i], b.rope_pos ? b.rope_pos : b.slot, n,
                                             ctx->rope_table.data() + static_cast<int64_t>(i) * n * c.n_rot,
                                             b.rope_pos ? b.rope_pos_per_row : 1));
  }

  // The layers' products over packed matrices: prompt rows on the tile unit at any row count,
  // other rows never (ForwardBatch::prompt). The head below keeps the int8 kernel: it runs on
  // the few logit rows only.
  const auto route = [&](const ops::WeightView& w) { return ops::RouteForRows(w, b.prompt); };
  auto matmul = [&](const ops::WeightView& w, const float* in, float* out) {
    return ops::MatMul(kt, pool, route(w), in, n, w.k, out, w.n, &ctx->matmul_scratch);
  };
  // x += in W^T: the product plus x goes to xn (added by each thread to its own columns while
  // they are in cache, not in a serial pass afterwards), and then xn is the residual stream.
  auto matmul_add_to_x = [&](const ops::WeightView& w, const float* in) {
    ops::MatmulEpilogue add_x;
    add_x.residual = x;
    add_x.ld_residual = d;
    VLMD_RETURN_IF_ERROR(
        ops::MatMul(kt, pool, route(w), in, n, w.k, xn, d, &ctx->matmul_scratch, &add_x));
    std::swap(x, xn);
    return Status::Ok();
  };
  const auto observe = [&](const std::vector<std::string>& names, const float* in, int64_t cols) {
    if (ctx->observer) ctx->observer->Observe(names, in, n, cols);
  };
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[l];
    VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, x, L.attn_norm.data(), xn, n, d, c.rms_eps));
    observe(L.names_qkv, xn, d);
    if (L.wqkv.packed && kt.packed_matmul) {
      VLMD_RETURN_IF_ERROR(matmul(L.wqkv, xn, ctx->qkv.data()));  // [n, q_dim + 2 kv_dim]
      SplitQkv(ctx->qkv.data(), n, qd, kvd, ctx->q.data(), ctx->k.data(), ctx->v.data());
    } else {
      VLMD_RETURN_IF_ERROR(matmul(L.wq, xn, ctx->q.data()));  // [n, q_dim]
      VLMD_RETURN_IF_ERROR(matmul(L.wk, xn, ctx->k.data()));  // [n, kv_dim]
      VLMD_RETURN_IF_ERROR(matmul(L.wv, xn, ctx->v.data()));  // [n, kv_dim]
    }
    AddBias(ctx->q.data(), L.bq, n);
    AddBias(ctx->k.data(), L.bk, n);
    AddBias(ctx->v.data(), L.bv, n);
    if (L.spec.qk_norm) {  // per head: rows of head_dim
      VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, ctx->q.data(), L.q_norm.data(), ctx->q.data(),
                                        n * c.n_heads, c.head_dim, c.rms_eps));
      VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, ctx->k.data(), L.k_norm.data(), ctx->k.data(),
                                        n * c.n_kv_heads, c.head_dim, c.rms_eps));
    }
    const ops::RopeParams& rope = rope_sets_[static_cast<size_t>(L.spec.rope)];
    const float* rope_table = ctx->rope_table.data() + L.spec.rope * n * c.n_rot;
    VLMD_RETURN_IF_ERROR(ops::RopeWithTable(kt, pool, ctx->q.data(), n, c.n_heads, c.head_dim, 0,
                                            rope_table, rope.n_rot, rope.neox));
    VLMD_RETURN_IF_ERROR(ops::RopeWithTable(kt, pool, ctx->k.data(), n, c.n_kv_heads, c.head_dim,
                                            0, rope_table, rope.n_rot, rope.neox));
    if (c.attn_scale > 0.0f) {
      for (int64_t i = 0; i < n * qd; ++i) ctx->q[static_cast<size_t>(i)] *= c.attn_scale;
    }
    kt.round_f16(ctx->q.data(), ctx->q.data(), n * qd);  // SIMD, bit-exact with F32ToF16
    VLMD_RETURN_IF_ERROR(Attend(b, caches, l, mask_pos, ctx));                 // attn [n, q_dim]
    observe(L.names_o, ctx->attn.data(), qd);
    if (c.gemma3) {  // x += RmsNorm(attn Wo^T)
      VLMD_RETURN_IF_ERROR(matmul(L.wo, ctx->attn.data(), xn));
      VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, xn, L.post_attn_norm.data(), xn, n, d, c.rms_eps));
      AddInPlace(x, xn, n * d);
    } else {
      VLMD_RETURN_IF_ERROR(matmul_add_to_x(L.wo, ctx->attn.data()));   // x += attn Wo^T
    }
    VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, x, L.ffn_norm.data(), xn, n, d, c.rms_eps));
    observe(L.names_gate_up, xn, d);
    if (c.n_expert > 0) {  // x += MoE(xn), into attn (free until the next layer's attention)
      VLMD_RETURN_IF_ERROR(MoeFeedForward(kt, pool, L.moe, xn, n, d, b.prompt, &ctx->moe,
                                          &ctx->matmul_scratch, ctx->attn.data(), ctx->observer));
      AddInPlace(x, ctx->attn.data(), n * d);
    } else {
      if (L.w_gate_up.packed && kt.packed_matmul) {
        VLMD_RETURN_IF_ERROR(matmul(L.w_gate_up, xn, ctx->up.data()));  // [n, 2 d_ff]
        VLMD_RETURN_IF_ERROR(c.gemma3 ? ops::GeGluRows(kt, pool, ctx->up.data(), n, ff, ctx->gate.data())
                                      : ops::SwiGluRows(kt, pool, ctx->up.data(), n, ff, ctx->gate.data()));
      } else {
        VLMD_RETURN_IF_ERROR(matmul(L.w_gate, xn, ctx->gate.data()));  // [n, d_ff]
        VLMD_RETURN_IF_ERROR(matmul(L.w_up, xn, ctx->up.data()));      // [n, d_ff]
        VLMD_RETURN_IF_ERROR(c.gemma3 ? ops::GeGlu(kt, pool, ctx->gate.data(), ctx->up.data(),
                                                   ctx->gate.data(), n * ff)
                                      : ops::SwiGlu(kt, pool, ctx->gate.data(), ctx->up.data(),
                                                    ctx->gate.data(), n * ff));
      }
      observe(L.names_down, ctx->gate.data(), ff);
      if (c.gemma3) {  // x += RmsNorm(h Wdown^T)
        VLMD_RETURN_IF_ERROR(matmul(L.w_down, ctx->gate.data(), xn));
        VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, xn, L.post_ffn_norm.data(), xn, n, d, c.rms_eps));
        AddInPlace(x, xn, n * d);
      } else {
        VLMD_RETURN_IF_ERROR(matmul_add_to_x(L.w_down, ctx->gate.data()));  // x += h Wdown^T
      }
    }
    if (L.spec.deepstack_slice > 0 && b.embeddings != nullptr) {
      // Deepstack: image rows add their slice (text rows' slices are zero).
      const int64_t slice = L.spec.deepstack_slice;
      for (int64_t r = 0; r < n; ++r) {
        if (b.tokens[r] < 0) AddInPlace(x + r * d, b.embeddings + r * w_inp + slice * d, d);
      }
    }
  }
  // Each sequence now holds exactly the positions up to its last row (rows that restarted
  // below n_filled replaced the old suffix).
  for (int64_t r = 0; r < n; ++r) {
    if (r + 1 == n || b.seq[r + 1] != b.seq[r]) caches[b.seq[r]]->set_n_filled(b.slot[r] + 1);
  }
  if (b.n_logit_rows == 0) return Status::Ok();
  const int64_t nl = b.n_logit_rows;
  Grow(ctx->logit_in, nl * d);
  for (int64_t i = 0; i < nl; ++i) {
    const int32_t r = b.logit_rows[i];  // validated above, before any state changed
    std::copy_n(x + static_cast<int64_t>(r) * d, d, ctx->logit_in.data() + i * d);
  }
  VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, ctx->logit_in.data(), output_norm_.data(),
                                    ctx->logit_in.data(), nl, d, c.rms_eps));
  ops::WeightView head = output_;
  head.packed_tile_route = ops::PackedTileRoute::kNever;
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, head, ctx->logit_in.data(), nl, d, logits,
                                   c.n_vocab, &ctx->matmul_scratch));
  if (c.logit_softcap > 0.0f) {
    const float cap = c.logit_softcap, inv = 1.0f / c.logit_softcap;
    for (int64_t i = 0; i < nl * c.n_vocab; ++i) logits[i] = cap * std::tanh(logits[i] * inv);
  }
  if (!b.check_finite) return Status::Ok();
  return ops::CheckFinite(logits, nl * c.n_vocab, "logits");
}

}  // namespace vlmd::engine::models
