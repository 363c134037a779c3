// CLIP / SigLIP vision transformer forward (see clip_vit.h); the blocks' numerics are
// vit_block.cpp's. The token layout is llama.cpp's, which differs from HF CLIP: the class token
// is appended AFTER the patches and position embedding row r is added to row r.
#include "engine/models/clip_vit.h"

#include <algorithm>
#include <cmath>

#include "engine/models/weights.h"
#include "engine/ops/norm.h"
#include "engine/ops/numerics.h"

namespace vlmd::engine::models {
namespace {

ops::MatmulEpilogue BiasEpilogue(const F32Weights& b) {
  return ops::MatmulEpilogue{b.empty() ? nullptr : b.data(), nullptr};
}

}  // namespace

Result<std::unique_ptr<ClipVit>> ClipVit::Load(const gguf::GgufFile& f, const VisionConfig& c,
                                               const ops::WeightPacking& packing) {
  std::unique_ptr<ClipVit> m(new ClipVit());
  m->config_ = c;
  const int64_t d = c.d_model, ff = c.d_ff;
  VLMD_ASSIGN_OR_RETURN(m->patch_w_, GetPatchKernel(f, "v.patch_embd.weight", c.patch_size, d));
  // Packed like the blocks' weights (in the fast precision: the tile unit, or int8 without one).
  VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, &m->patch_w_, &m->packed_));
  m->released_ += ReleasePackedRows(f, m->patch_w_);
  VLMD_ASSIGN_OR_RETURN(m->patch_b_, GetOptionalF32(f, "v.patch_embd.bias", {d}));
  VLMD_ASSIGN_OR_RETURN(m->class_embd_, GetOptionalF32(f, "v.class_embd", {d}));
  m->n_positions_ = c.n_patches() + (m->class_embd_.empty() ? 0 : 1);
  VLMD_ASSIGN_OR_RETURN(m->pos_embd_, GetF32(f, "v.position_embd.weight", {d, m->n_positions_}));
  VLMD_ASSIGN_OR_RETURN(m->pre_ln_w_, GetOptionalF32(f, "v.pre_ln.weight", {d}));
  VLMD_ASSIGN_OR_RETURN(m->pre_ln_b_, GetOptionalF32(f, "v.pre_ln.bias", {d}));
  VLMD_ASSIGN_OR_RETURN(m->post_ln_w_, GetOptionalF32(f, "v.post_ln.weight", {d}));
  VLMD_ASSIGN_OR_RETURN(m->post_ln_b_, GetOptionalF32(f, "v.post_ln.bias", {d}));
  // llama.cpp's LLaVA graph stops after block n_layers - 2 (the "second-to-last layer" features
  // LLaVA was trained on) unless clip.vision.feature_layer names the last block to run
  // (VisionConfig::n_layers_run).
  m->n_layers_used_ = c.projector == ProjectorType::kMlp ? std::max(c.n_layers_run, 0) : c.n_layers;
  const bool internvl = c.projector == ProjectorType::kInternvl;
  // InternViT-6B (InternVL 2.5/3 26B, 38B, 78B) uses RMSNorm where the 300M ViT has LayerNorm,
  // and q/k norms: llama.cpp (models/internvl.cpp) tells them apart by the shape alone (width
  // 3200, 45 blocks), and so does vlmd, so that a file runs the same way in both.
  const bool internvit_6b = internvl && d == 3200 && c.n_layers == 45;
  m->block_ = VitBlockSpec{.d_model = d, .d_ff = ff, .n_heads = c.n_heads,
                           .head_dim = c.head_dim, .eps = c.eps,
                           .norm = internvit_6b ? VitNorm::kRmsNorm : VitNorm::kLayerNorm,
                           .ffn_act = c.ffn_act, .fast = packing.precision == ops::Precision::kFast};
  const VitBlockTensors tensors{.layer_scale = internvl, .qk_norm = internvl,
                                .ffn_swapped = c.ffn_swapped};
  for (int32_t l = 0; l < m->n_layers_used_; ++l) {
    VLMD_ASSIGN_OR_RETURN(VitBlockWeights block,
                          LoadVitBlock(f, l, m->block_, tensors, packing, &m->packed_, &m->released_));
    m->layers_.push_back(std::move(block));
  }
  for (int32_t l = m->n_layers_used_; l < c.n_layers; ++l) {
    SkipTensors(f, "v.blk." + std::to_string(l) + ".");  // never run (feature layer)
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

bool ClipVit::UsesTileBlocks(const kernels::KernelTable& kt) const {
  return VitBlocksOnTiles(block_, layers_, kt);
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
  GrowScratch(ctx->patches, n_tiles * np * patch_w_.k);
  GrowScratch(ctx->x, n * d);
  GrowScratch(ctx->xn, n * d);
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
  // Each tile attends within its own rows.
  std::vector<ops::RowSpan> spans(static_cast<size_t>(n_tiles));
  for (int64_t t = 0; t < n_tiles; ++t) spans[static_cast<size_t>(t)] = {t * npos, npos};
  const VitBlockRows rows{.x = x, .n = n, .spans = spans};
  const bool on_tiles = UsesTileBlocks(kt);
  for (const VitBlockWeights& block : layers_) {
    VLMD_RETURN_IF_ERROR(RunVitBlock(block_, block, rows, on_tiles, ctx));
  }
  if (!post_ln_w_.empty()) {
    VLMD_RETURN_IF_ERROR(ops::LayerNorm(kt, pool, x, post_ln_w_.data(),
                                        post_ln_b_.empty() ? nullptr : post_ln_b_.data(), x, n, d,
                                        c.eps));
  }
  std::copy_n(x, n * d, out);
  return ops::CheckFinite(out, n * d, "vision encoder output");
}

}  // namespace vlmd::engine::models
