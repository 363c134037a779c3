// CLIP / SigLIP vision transformer forward (see clip_vit.h). Numerics follow llama.cpp's CPU
// backend where parity needs it: F16 weights see F16-rounded activations (inside MatMul), the
// flash-attention path of the encoder casts K and V to F16 and rounds Q to F16, and GELU variants
// go through ggml's 16-bit tables. The token layout is llama.cpp's, which differs from HF CLIP:
// the class token is appended AFTER the patches and position embedding row r is added to row r.
#include "engine/models/clip_vit.h"

#include <algorithm>
#include <cmath>

#include "engine/models/vit_attention.h"
#include "engine/models/weights.h"
#include "engine/ops/norm.h"
#include "engine/ops/numerics.h"
#include "engine/ops/parallel.h"
#include "engine/tensor/fp16.h"

namespace vlmd::engine::models {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}



}  // namespace

uint64_t VisionContext::bytes() const {
  auto floats = [](const std::vector<float>& v) { return v.capacity() * sizeof(float); };
  uint64_t b = matmul_scratch.capacity();
  for (const std::vector<float>* v : {&patches, &x, &xn, &q, &k, &v, &attn, &ff, &proj_in,
                                      &proj_mid}) {
    b += floats(*v);
  }
  for (const Bf16Buffer* buf : {&xn16, &q16, &k16, &v16, &attn16, &ff16}) b += buf->bytes();
  for (const AttentionWork& w : attention_work) {
    b += floats(w.k_head) + floats(w.v_head) + floats(w.v_head_t) + floats(w.scores) +
         w.q_bf16.bytes() + w.k_tiles.bytes() + w.v_tiles.bytes() + w.o_block.capacity();
  }
  return b;
}

Status ActivateLikeGgml(const kernels::KernelTable& kt, ThreadPool* pool, ops::Activation act,
                        float* x, int64_t n) {
  // Chunks small enough for a stack copy of their inputs, spread over the pool.
  constexpr int64_t kChunk = 2048;
  const bool gelu_clamp = act == ops::Activation::kGeluTanh;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  return ops::internal::ForJobs(pool, chunks, [&](int64_t c, int /*worker*/) {
    float* p = x + c * kChunk;
    const int64_t len = std::min(kChunk, n - c * kChunk);
    float orig[kChunk];
    // ggml's GELU passes inputs >= 10 through unchanged and maps <= -10 to 0 (its f16 table
    // covers the rest): remember the originals to apply that after the rounded activation.
    if (gelu_clamp) std::copy_n(p, len, orig);
    kt.round_f16(p, p, len);
    Status s = ops::Activate(kt, nullptr, act, p, p, len);
    kt.round_f16(p, p, len);
    if (gelu_clamp) {
      for (int64_t i = 0; i < len; ++i) {
        if (orig[i] <= -10.0f) p[i] = 0.0f;
        if (orig[i] >= 10.0f) p[i] = orig[i];
      }
    }
    return s;
  });
}

Result<std::unique_ptr<ClipVit>> ClipVit::Load(const gguf::GgufFile& f, const VisionConfig& c,
                                               const ops::WeightPacking& packing) {
  std::unique_ptr<ClipVit> m(new ClipVit());
  m->config_ = c;
  m->fast_ = packing.precision == ops::Precision::kFast;
  const int64_t d = c.d_model, ff = c.d_ff;
  VLMD_ASSIGN_OR_RETURN(m->patch_w_, GetPatchKernel(f, "v.patch_embd.weight", c.patch_size, d));
  VLMD_ASSIGN_OR_RETURN(m->patch_b_, GetOptionalF32(f, "v.patch_embd.bias", {d}));
  VLMD_ASSIGN_OR_RETURN(m->class_embd_, GetOptionalF32(f, "v.class_embd", {d}));
  m->n_positions_ = c.n_patches() + (m->class_embd_.empty() ? 0 : 1);
  VLMD_ASSIGN_OR_RETURN(m->pos_embd_, GetF32(f, "v.position_embd.weight", {d, m->n_positions_}));
  VLMD_ASSIGN_OR_RETURN(m->pre_ln_w_, GetOptionalF32(f, "v.pre_ln.weight", {d}));
  VLMD_ASSIGN_OR_RETURN(m->pre_ln_b_, GetOptionalF32(f, "v.pre_ln.bias", {d}));
  VLMD_ASSIGN_OR_RETURN(m->post_ln_w_, GetOptionalF32(f, "v.post_ln.weight", {d}));
  VLMD_ASSIGN_OR_RETURN(m->post_ln_b_, GetOptionalF32(f, "v.post_ln.bias", {d}));
  // llama.cpp's LLaVA graph stops after block n_layers - 2 (the "second-to-last layer" features
  // LLaVA was trained on) unless clip.vision.feature_layer says otherwise (not supported yet).
  if (c.projector == ProjectorType::kMlp) {
    if (f.Find("clip.vision.feature_layer") != nullptr) {
      return UnimplementedError("clip.vision.feature_layer (multi-layer features) is not supported");
    }
    m->n_layers_used_ = std::max(c.n_layers - 1, 0);
  } else {
    m->n_layers_used_ = c.n_layers;
  }
  m->layers_.resize(m->n_layers_used_);
  for (int32_t l = 0; l < m->n_layers_used_; ++l) {
    Layer& L = m->layers_[l];
    const std::string p = "v.blk." + std::to_string(l) + ".";
    VLMD_ASSIGN_OR_RETURN(L.ln1_w, GetF32(f, p + "ln1.weight", {d}));
    VLMD_ASSIGN_OR_RETURN(L.ln1_b, GetOptionalF32(f, p + "ln1.bias", {d}));
    VLMD_ASSIGN_OR_RETURN(L.ln2_w, GetF32(f, p + "ln2.weight", {d}));
    VLMD_ASSIGN_OR_RETURN(L.ln2_b, GetOptionalF32(f, p + "ln2.bias", {d}));
    VLMD_ASSIGN_OR_RETURN(L.wq, GetMatrix(f, p + "attn_q.weight", d, d));
    VLMD_ASSIGN_OR_RETURN(L.wk, GetMatrix(f, p + "attn_k.weight", d, d));
    VLMD_ASSIGN_OR_RETURN(L.wv, GetMatrix(f, p + "attn_v.weight", d, d));
    VLMD_ASSIGN_OR_RETURN(L.wo, GetMatrix(f, p + "attn_out.weight", d, d));
    VLMD_ASSIGN_OR_RETURN(L.w_up, GetMatrix(f, p + "ffn_up.weight", d, ff));
    VLMD_ASSIGN_OR_RETURN(L.w_down, GetMatrix(f, p + "ffn_down.weight", ff, d));
    for (ops::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_up, &L.w_down}) {
      VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, w, &m->packed_));
      m->released_ += ReleasePackedRows(f, *w);  // runs from the packed copy from now on
    }
    VLMD_ASSIGN_OR_RETURN(L.bq, GetOptionalF32(f, p + "attn_q.bias", {d}));
    if (m->fast_) {
      const float q_scale = TileQueryScale(c.head_dim);
      for (float b : L.bq) L.bq_scaled.push_back(b * q_scale);
    }
    VLMD_ASSIGN_OR_RETURN(L.bk, GetOptionalF32(f, p + "attn_k.bias", {d}));
    VLMD_ASSIGN_OR_RETURN(L.bv, GetOptionalF32(f, p + "attn_v.bias", {d}));
    VLMD_ASSIGN_OR_RETURN(L.bo, GetOptionalF32(f, p + "attn_out.bias", {d}));
    VLMD_ASSIGN_OR_RETURN(L.b_up, GetOptionalF32(f, p + "ffn_up.bias", {ff}));
    VLMD_ASSIGN_OR_RETURN(L.b_down, GetOptionalF32(f, p + "ffn_down.bias", {d}));
  }
  return m;
}

// patches[(t * n_patches + py * side + px) * 3pp + (c * p + ky) * p + kx] =
//   pixels[t][c][py * p + ky][px * p + kx]   (im2col of the stride-p convolution)
void ClipVit::Unfold(const float* pixels, int64_t n_tiles, float* patches) const {
  const int64_t p = config_.patch_size, side = config_.patches_per_side();
  const int64_t s = config_.image_size, k = 3 * p * p;
  for (int64_t t = 0; t < n_tiles; ++t) {
    const float* img = pixels + t * 3 * s * s;
    for (int64_t py = 0; py < side; ++py) {
      for (int64_t px = 0; px < side; ++px) {
        float* row = patches + (t * side * side + py * side + px) * k;
        for (int64_t c = 0; c < 3; ++c) {
          for (int64_t ky = 0; ky < p; ++ky) {
            const float* src = img + (c * s + py * p + ky) * s + px * p;
            std::copy_n(src, p, row + (c * p + ky) * p);
          }
        }
      }
    }
  }
}

// Full (non-causal) attention of every tile: each tile's rows are one span.
Status ClipVit::Attend(int64_t n_tiles, VisionContext* ctx) const {
  std::vector<RowSpan> spans(static_cast<size_t>(n_tiles));
  for (int64_t t = 0; t < n_tiles; ++t) spans[static_cast<size_t>(t)] = {t * n_positions_, n_positions_};
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  return VitSpanAttention(ctx, spans, config_.d_model, config_.n_heads, config_.head_dim, scale);
}

namespace {
ops::MatmulEpilogue BiasEpilogue(const std::vector<float>& b) {
  return ops::MatmulEpilogue{b.empty() ? nullptr : b.data(), nullptr};
}
}  // namespace

// The blocks on f32 activations (exact precision, or fast without AMX): biases (and in fast
// precision the FFN activation) are applied by the matmul's epilogue, block by block while the
// outputs are in cache, instead of in passes of their own.
Status ClipVit::RunBlocks(int64_t n_tiles, VisionContext* ctx) const {
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, ff = c.d_ff, n = n_tiles * n_positions_;
  Grow(ctx->q, n * d);
  Grow(ctx->k, n * d);
  Grow(ctx->v, n * d);
  Grow(ctx->attn, n * d);
  Grow(ctx->ff, n * ff);
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  auto matmul = [&](const ops::WeightView& w, const float* in, float* o,
                    const ops::MatmulEpilogue& ep) {
    return ops::MatMul(kt, pool, w, in, n, w.k, o, w.n, &ctx->matmul_scratch, &ep);
  };
  float* x = ctx->x.data();    // [n, d] residual stream
  float* xn = ctx->xn.data();  // [n, d] block input after LayerNorm
  for (const Layer& L : layers_) {
    VLMD_RETURN_IF_ERROR(ops::LayerNorm(kt, pool, x, L.ln1_w.data(),
                                        L.ln1_b.empty() ? nullptr : L.ln1_b.data(), xn, n, d,
                                        c.eps));
    const ops::WeightView* qkv_w[] = {&L.wq, &L.wk, &L.wv};
    float* const qkv_out[] = {ctx->q.data(), ctx->k.data(), ctx->v.data()};  // [n, d] each
    const ops::MatmulEpilogue qkv_ep[] = {BiasEpilogue(L.bq), BiasEpilogue(L.bk),
                                          BiasEpilogue(L.bv)};
    const ops::MatmulEpilogue* const qkv_ep_ptr[] = {&qkv_ep[0], &qkv_ep[1], &qkv_ep[2]};
    VLMD_RETURN_IF_ERROR(ops::MatMulShared(kt, pool, qkv_w, xn, n, d, qkv_out,
                                           &ctx->matmul_scratch, qkv_ep_ptr));
    VLMD_RETURN_IF_ERROR(Attend(n_tiles, ctx));  // attn [n, d]
    VLMD_RETURN_IF_ERROR(matmul(L.wo, ctx->attn.data(), xn, BiasEpilogue(L.bo)));
    for (int64_t i = 0; i < n * d; ++i) x[i] += xn[i];
    VLMD_RETURN_IF_ERROR(ops::LayerNorm(kt, pool, x, L.ln2_w.data(),
                                        L.ln2_b.empty() ? nullptr : L.ln2_b.data(), xn, n, d,
                                        c.eps));
    // Exact follows ggml's 16-bit activation tables (parity); fast computes the function itself.
    ops::MatmulEpilogue up_ep = BiasEpilogue(L.b_up);
    if (fast_) {
      up_ep.act = ops::ActivationKernel(kt, c.ffn_act);
      if (up_ep.act == nullptr) {
        return UnimplementedError("vision encode: no kernel for the FFN activation");
      }
    }
    VLMD_RETURN_IF_ERROR(matmul(L.w_up, xn, ctx->ff.data(), up_ep));  // [n, d_ff]
    if (!fast_) {
      VLMD_RETURN_IF_ERROR(ActivateLikeGgml(kt, pool, c.ffn_act, ctx->ff.data(), n * ff));
    }
    VLMD_RETURN_IF_ERROR(matmul(L.w_down, ctx->ff.data(), xn, BiasEpilogue(L.b_down)));
    for (int64_t i = 0; i < n * d; ++i) x[i] += xn[i];
  }
  return Status::Ok();
}

Status ClipVit::Encode(const float* pixels, int64_t n_tiles, VisionContext* ctx,
                       float* out) const {
  if (n_tiles < 1 || pixels == nullptr || out == nullptr || ctx == nullptr ||
      ctx->kernels == nullptr) {
    return InvalidArgumentError("vision encode: no tiles or null buffers");
  }
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, np = c.n_patches(), npos = n_positions_;
  const int64_t n = n_tiles * npos;  // rows of the residual stream, tile-major
  Grow(ctx->patches, n_tiles * np * patch_w_.k);
  Grow(ctx->x, n * d);
  Grow(ctx->xn, n * d);
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  float* x = ctx->x.data();    // [n, d] residual stream
  float* xn = ctx->xn.data();  // [n_tiles * np, d] patch embeddings

  // Patch embedding for all tiles at once, into xn, then scattered into x so that each tile's
  // rows are its patches followed by the class token.
  Unfold(pixels, n_tiles, ctx->patches.data());
  const ops::MatmulEpilogue patch_ep = BiasEpilogue(patch_b_);
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, patch_w_, ctx->patches.data(), n_tiles * np,
                                   patch_w_.k, xn, d, &ctx->matmul_scratch, &patch_ep));
  for (int64_t t = 0; t < n_tiles; ++t) {
    float* tile = x + t * npos * d;
    std::copy_n(xn + t * np * d, np * d, tile);
    if (has_class_token()) std::copy_n(class_embd_.data(), d, tile + np * d);
    for (int64_t i = 0; i < npos * d; ++i) tile[i] += pos_embd_[i];
  }
  if (!pre_ln_w_.empty()) {
    VLMD_RETURN_IF_ERROR(ops::LayerNorm(kt, pool, x, pre_ln_w_.data(),
                                        pre_ln_b_.empty() ? nullptr : pre_ln_b_.data(), x, n, d,
                                        c.eps));
  }
  VLMD_RETURN_IF_ERROR(UsesTileBlocks(kt) ? RunTileBlocks(n_tiles, ctx)
                                          : RunBlocks(n_tiles, ctx));
  if (!post_ln_w_.empty()) {
    VLMD_RETURN_IF_ERROR(ops::LayerNorm(kt, pool, x, post_ln_w_.data(),
                                        post_ln_b_.empty() ? nullptr : post_ln_b_.data(), x, n, d,
                                        c.eps));
  }
  std::copy_n(x, n * d, out);
  return ops::CheckFinite(out, n * d, "vision encoder output");
}

}  // namespace vlmd::engine::models
