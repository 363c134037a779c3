// Idefics3 pixel shuffle + linear projector (see projector_idefics3.h). The element order is the
// one llama.cpp's reshape/permute sequence produces (build_patch_merge_permute): for a 2x2 group
// the features are [patch(0,0) | patch(0,1) | patch(1,0) | patch(1,1)] (row, column).
#include "engine/models/projector_idefics3.h"

#include <algorithm>

#include "engine/models/weights.h"

namespace vlmd::engine::models {

void PixelShuffle(const float* in, int64_t side, int64_t d, int64_t s, float* out) {
  const int64_t g = side / s;
  for (int64_t gy = 0; gy < g; ++gy) {
    for (int64_t gx = 0; gx < g; ++gx) {
      float* token = out + (gy * g + gx) * d * s * s;
      for (int64_t dy = 0; dy < s; ++dy) {
        for (int64_t dx = 0; dx < s; ++dx) {
          const int64_t patch = (gy * s + dy) * side + gx * s + dx;
          std::copy_n(in + patch * d, d, token + (dy * s + dx) * d);
        }
      }
    }
  }
}

Result<std::unique_ptr<Idefics3Projector>> Idefics3Projector::Load(const gguf::GgufFile& f,
                                                                   const VisionConfig& c,
                                                                   const ops::WeightPacking& packing) {
  std::unique_ptr<Idefics3Projector> p(new Idefics3Projector());
  const int64_t k = static_cast<int64_t>(c.d_model) * c.scale_factor * c.scale_factor;
  VLMD_ASSIGN_OR_RETURN(p->fc_, GetMatrix(f, "mm.model.fc.weight", k, c.projection_dim));
  VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, &p->fc_, &p->packed_));
  p->released_ += ReleasePackedRows(f, p->fc_);
  return p;
}

Status Idefics3Projector::Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles,
                                  VisionContext* ctx, float* out) const {
  const VisionConfig& c = vit.config();
  const int64_t d = c.d_model, npos = vit.n_positions(), side = c.patches_per_side();
  const int64_t ntok = tokens_per_tile(vit), rows = n_tiles * ntok;
  if (static_cast<int64_t>(ctx->proj_in.size()) < rows * fc_.k) ctx->proj_in.resize(rows * fc_.k);
  for (int64_t t = 0; t < n_tiles; ++t) {
    PixelShuffle(vit_out + t * npos * d, side, d, c.scale_factor,
                 ctx->proj_in.data() + t * ntok * fc_.k);
  }
  return ops::MatMul(*ctx->kernels, ctx->pool, fc_, ctx->proj_in.data(), rows, fc_.k, out, fc_.n,
                     &ctx->matmul_scratch);
}

}  // namespace vlmd::engine::models
