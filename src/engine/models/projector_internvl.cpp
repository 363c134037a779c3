// InternVL projector (see projector_internvl.h).
#include "engine/models/projector_internvl.h"

#include <algorithm>

#include "engine/models/projector_idefics3.h"
#include "engine/models/weights.h"
#include "engine/ops/activation.h"
#include "engine/ops/norm.h"

namespace vlmd::engine::models {
namespace {

// llama.cpp's InternVL graph normalizes the shuffled features with this epsilon, whatever the
// file's (clip.cpp clip_graph_internvl::build).
constexpr float kProjectorNormEps = 1e-5f;

}  // namespace

Result<std::unique_ptr<InternVlProjector>> InternVlProjector::Load(const gguf::GgufFile& f,
                                                                   const VisionConfig& c,
                                                                   const ops::WeightPacking& packing) {
  std::unique_ptr<InternVlProjector> p(new InternVlProjector());
  const int64_t k = static_cast<int64_t>(c.d_model) * c.scale_factor * c.scale_factor;
  const int64_t n = c.projection_dim;
  VLMD_ASSIGN_OR_RETURN(p->norm_w_, GetF32(f, "mm.model.mlp.0.weight", {k}));
  VLMD_ASSIGN_OR_RETURN(p->norm_b_, GetF32(f, "mm.model.mlp.0.bias", {k}));
  VLMD_ASSIGN_OR_RETURN(p->w1_, GetMatrix(f, "mm.model.mlp.1.weight", k, n));
  VLMD_ASSIGN_OR_RETURN(p->b1_, GetF32(f, "mm.model.mlp.1.bias", {n}));
  VLMD_ASSIGN_OR_RETURN(p->w3_, GetMatrix(f, "mm.model.mlp.3.weight", n, n));
  VLMD_ASSIGN_OR_RETURN(p->b3_, GetF32(f, "mm.model.mlp.3.bias", {n}));
  for (ops::WeightView* w : {&p->w1_, &p->w3_}) {
    VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, w, &p->packed_));
    p->released_ += ReleasePackedRows(f, *w);
  }
  return p;
}

Status InternVlProjector::Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles,
                                  VisionContext* ctx, float* out) const {
  const VisionConfig& c = vit.config();
  const int64_t d = c.d_model, npos = vit.n_positions(), side = c.patches_per_side();
  const int64_t ntok = tokens_per_tile(vit), rows = n_tiles * ntok, k = w1_.k;
  GrowScratch(ctx->proj_in, rows * std::max(k, w1_.n));
  GrowScratch(ctx->proj_mid, rows * k);
  // The class token is the last row of each tile (appended after the patches): not shuffled.
  for (int64_t t = 0; t < n_tiles; ++t) {
    PixelShuffle(vit_out + t * npos * d, side, d, c.scale_factor, ctx->proj_in.data() + t * ntok * k);
  }
  const kernels::KernelTable& kt = *ctx->kernels;
  float* normed = ctx->proj_mid.data();
  VLMD_RETURN_IF_ERROR(ops::LayerNorm(kt, ctx->pool, ctx->proj_in.data(), norm_w_.data(), norm_b_.data(),
                                      normed, rows, k, kProjectorNormEps));
  float* hidden = ctx->proj_in.data();  // [rows, n_embd]: the shuffled rows are not needed again
  const ops::MatmulEpilogue bias1{.bias = b1_.data()}, bias3{.bias = b3_.data()};
  VLMD_RETURN_IF_ERROR(
      ops::MatMul(kt, ctx->pool, w1_, normed, rows, k, hidden, w1_.n, &ctx->matmul_scratch, &bias1));
  VLMD_RETURN_IF_ERROR(ops::ActivateLikeGgml(kt, ctx->pool, ops::Activation::kGeluTanh, hidden, rows * w1_.n));
  return ops::MatMul(kt, ctx->pool, w3_, hidden, rows, w3_.k, out, w3_.n, &ctx->matmul_scratch, &bias3);
}

}  // namespace vlmd::engine::models
