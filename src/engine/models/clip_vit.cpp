// CLIP / SigLIP vision transformer forward (see clip_vit.h). Numerics follow llama.cpp's CPU
// backend where parity needs it: F16 weights see F16-rounded activations (inside MatMul), the
// flash-attention path of the encoder casts K and V to F16 and rounds Q to F16, and GELU variants
// go through ggml's 16-bit tables. The token layout is llama.cpp's, which differs from HF CLIP:
// the class token is appended AFTER the patches and position embedding row r is added to row r.
#include "engine/models/clip_vit.h"

#include <algorithm>
#include <cmath>

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



// The 4-D patch kernel [p, p, 3, D] (ggml order) viewed as D rows of 3*p*p values ordered
// (channel, ky, kx), which is also the order Unfold writes.
Result<ops::WeightView> GetPatchKernel(const gguf::GgufFile& f, int64_t p, int64_t d) {
  const std::string name = "v.patch_embd.weight";
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return NotFoundError("model tensor '" + name + "' is missing");
  if (t->n_dims != 4 || t->ne[0] != p || t->ne[1] != p || t->ne[2] != 3 || t->ne[3] != d) {
    return InvalidArgumentError("tensor '" + name + "' has shape [" + std::to_string(t->ne[0]) +
                                ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) +
                                ", " + std::to_string(t->ne[3]) + "], expected [" +
                                std::to_string(p) + ", " + std::to_string(p) + ", 3, " +
                                std::to_string(d) + "]");
  }
  auto row_bytes = RowBytes(t->type, 3 * p * p);
  if (!row_bytes || !GetDTypeTraits(t->type).compute_supported) {
    return UnimplementedError("tensor '" + name + "' has a type vlmd cannot compute with");
  }
  return ops::WeightView{t->type, d, 3 * p * p, t->data, static_cast<size_t>(*row_bytes)};
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
  VLMD_ASSIGN_OR_RETURN(m->patch_w_, GetPatchKernel(f, c.patch_size, d));
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

// Full (non-causal) attention of every tile, as two f32 GEMMs per (tile, head, query block):
// scores = Q_h K_h^T, softmax per row, out_h = P V_h. The score block is [kQueryBlock, n_pos],
// so memory stays bounded at any tile size; the GEMMs run at the matmul kernels' rate where a
// per-query dot over f16 rows would be bound by horizontal sums and conversions.
Status ClipVit::Attend(int64_t n_tiles, VisionContext* ctx) const {
  constexpr int64_t kQueryBlock = 1024;
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, npos = n_positions_;
  const int64_t hd = c.head_dim, heads = c.n_heads;
  // llama.cpp's encoder runs flash attention: K and V are cast to F16, Q is rounded to F16 for
  // the K.Q products (F32 accumulation). The f16 values are exact in f32, so the GEMMs below
  // multiply exactly those numbers. Each job rounds its own Q slice and its copies of K and V.
  const kernels::KernelTable& kt = *ctx->kernels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int workers = ctx->pool != nullptr ? ctx->pool->size() : 1;
  ctx->attention_work.resize(static_cast<size_t>(workers));
  for (auto& w : ctx->attention_work) {
    Grow(w.k_head, npos * hd);
    Grow(w.v_head_t, hd * npos);
    Grow(w.v_head, npos * hd);
    Grow(w.scores, std::min(kQueryBlock, npos) * npos);
  }
  const int64_t q_blocks = (npos + kQueryBlock - 1) / kQueryBlock;
  const int64_t jobs = n_tiles * heads * q_blocks;
  return ops::internal::ForJobs(ctx->pool, jobs, [&](int64_t job, int worker) {
    const int64_t qb = job % q_blocks, h = (job / q_blocks) % heads, t = job / (q_blocks * heads);
    const int64_t r0 = t * npos, q0 = qb * kQueryBlock, nq = std::min(kQueryBlock, npos - q0);
    VisionContext::AttentionWork& w = ctx->attention_work[static_cast<size_t>(worker)];
    for (int64_t j = 0; j < npos; ++j) {
      kt.round_f16(ctx->k.data() + (r0 + j) * d + h * hd, w.k_head.data() + j * hd, hd);
      kt.round_f16(ctx->v.data() + (r0 + j) * d + h * hd, w.v_head.data() + j * hd, hd);
    }
    for (int64_t i = 0; i < nq; ++i) {
      float* qr = ctx->q.data() + (r0 + q0 + i) * d + h * hd;
      kt.round_f16(qr, qr, hd);
    }
    // V^T in 16-row blocks: each block's reads stay in a few cache lines per row.
    for (int64_t j0 = 0; j0 < npos; j0 += 16) {
      const int64_t j1 = std::min(npos, j0 + 16);
      for (int64_t e = 0; e < hd; ++e) {
        float* dst = w.v_head_t.data() + e * npos;
        for (int64_t j = j0; j < j1; ++j) dst[j] = w.v_head[j * hd + e];
      }
    }
    const ops::WeightView k_view{DType::kF32, npos, hd, w.k_head.data(), 0};
    const ops::WeightView v_view{DType::kF32, hd, npos, w.v_head_t.data(), 0};
    Status s = ops::MatMul(kt, nullptr, k_view, ctx->q.data() + (r0 + q0) * d + h * hd, nq, d,
                           w.scores.data(), npos, nullptr);
    for (int64_t i = 0; s.ok() && i < nq; ++i) {
      float* row = w.scores.data() + i * npos;
      for (int64_t j = 0; j < npos; ++j) row[j] *= scale;
      kt.softmax(row, npos);
    }
    if (s.ok()) {
      s = ops::MatMul(kt, nullptr, v_view, w.scores.data(), nq, npos,
                      ctx->attn.data() + (r0 + q0) * d + h * hd, d, nullptr);
    }
    return s;
  });
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
