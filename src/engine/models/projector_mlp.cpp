// LLaVA "mlp" projector (see projector_mlp.h).
#include "engine/models/projector_mlp.h"

#include <algorithm>

#include "engine/models/weights.h"
#include "engine/ops/activation.h"

namespace vlmd::engine::models {

Result<std::unique_ptr<MlpProjector>> MlpProjector::Load(const gguf::GgufFile& f,
                                                         const VisionConfig& c,
                                                         const ops::WeightPacking& packing) {
  std::unique_ptr<MlpProjector> p(new MlpProjector());
  const gguf::TensorInfo* t0 = f.FindTensor("mm.0.weight");
  if (t0 == nullptr) return NotFoundError("model tensor 'mm.0.weight' is missing");
  const int64_t hidden = t0->ne[1];
  VLMD_ASSIGN_OR_RETURN(p->w0_, GetMatrix(f, "mm.0.weight", c.d_model, hidden));
  VLMD_ASSIGN_OR_RETURN(p->b0_, GetOptionalF32(f, "mm.0.bias", {hidden}));
  VLMD_ASSIGN_OR_RETURN(p->w2_, GetMatrix(f, "mm.2.weight", hidden, c.projection_dim));
  VLMD_ASSIGN_OR_RETURN(p->b2_, GetOptionalF32(f, "mm.2.bias", {c.projection_dim}));
  VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, &p->w0_, &p->packed_));
  VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, &p->w2_, &p->packed_));
  p->released_ += ReleasePackedRows(f, p->w0_) + ReleasePackedRows(f, p->w2_);
  // LLaVA-1.6 files carry it; llama.cpp's mtmd loads it and never uses it (no unpadding, no
  // newline rows: FAMILIES.md), so neither does vlmd.
  SkipTensors(f, "v.image_newline");
  return p;
}

Status MlpProjector::Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles,
                             VisionContext* ctx, float* out) const {
  const int64_t d = vit.config().d_model, npos = vit.n_positions();
  const int64_t ntok = tokens_per_tile(vit), rows = n_tiles * ntok;
  // llama.cpp keeps ViT rows [offset, offset + n_patches) with offset = 1 when there is a class
  // token. Its graph appends the class token after the patches, so this drops patch 0 and keeps
  // the class row last (a known llama.cpp quirk; reproduced for parity).
  const int64_t offset = vit.has_class_token() ? 1 : 0;
  if (static_cast<int64_t>(ctx->proj_in.size()) < rows * d) ctx->proj_in.resize(rows * d);
  for (int64_t t = 0; t < n_tiles; ++t) {
    std::copy_n(vit_out + (t * npos + offset) * d, ntok * d, ctx->proj_in.data() + t * ntok * d);
  }
  if (static_cast<int64_t>(ctx->proj_mid.size()) < rows * w0_.n) ctx->proj_mid.resize(rows * w0_.n);
  const kernels::KernelTable& kt = *ctx->kernels;
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, ctx->pool, w0_, ctx->proj_in.data(), rows, w0_.k,
                                   ctx->proj_mid.data(), w0_.n, &ctx->matmul_scratch));
  float* mid = ctx->proj_mid.data();
  if (!b0_.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < w0_.n; ++i) mid[r * w0_.n + i] += b0_[i];
    }
  }
  VLMD_RETURN_IF_ERROR(ops::ActivateLikeGgml(kt, ctx->pool, ops::Activation::kGeluTanh, mid,
                                        rows * w0_.n));
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, ctx->pool, w2_, mid, rows, w2_.k, out, w2_.n,
                                   &ctx->matmul_scratch));
  if (!b2_.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < w2_.n; ++i) out[r * w2_.n + i] += b2_[i];
    }
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::models
