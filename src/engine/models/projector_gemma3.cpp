// Gemma 3 projector (see projector_gemma3.h).
#include "engine/models/projector_gemma3.h"

#include <algorithm>

#include "engine/models/weights.h"
#include "engine/ops/norm.h"

namespace vlmd::engine::models {

void AveragePool(const float* in, int64_t side, int64_t d, int64_t k, float* out) {
  const int64_t g = side / k;
  const float inv = 1.0f / static_cast<float>(k * k);
  for (int64_t oy = 0; oy < g; ++oy) {
    for (int64_t ox = 0; ox < g; ++ox) {
      float* o = out + (oy * g + ox) * d;
      std::fill(o, o + d, 0.0f);
      for (int64_t ky = 0; ky < k; ++ky) {
        for (int64_t kx = 0; kx < k; ++kx) {
          const float* p = in + ((oy * k + ky) * side + ox * k + kx) * d;
          for (int64_t i = 0; i < d; ++i) o[i] += p[i];
        }
      }
      for (int64_t i = 0; i < d; ++i) o[i] *= inv;
    }
  }
}

Result<std::unique_ptr<Gemma3Projector>> Gemma3Projector::Load(const gguf::GgufFile& f,
                                                               const VisionConfig& c,
                                                               const ops::WeightPacking& packing) {
  std::unique_ptr<Gemma3Projector> p(new Gemma3Projector());
  const int64_t d = c.d_model, n = c.projection_dim;
  VLMD_ASSIGN_OR_RETURN(p->norm_w_, GetF32(f, "mm.soft_emb_norm.weight", {d}));
  const gguf::TensorInfo* t = f.FindTensor("mm.input_projection.weight");
  if (t == nullptr) return NotFoundError("model tensor 'mm.input_projection.weight' is missing");
  if (t->n_dims != 2 || t->ne[0] != n || t->ne[1] != d) {
    return InvalidArgumentError("mm.input_projection.weight is not [" + std::to_string(n) + ", " +
                                std::to_string(d) + "] (text width, vision width)");
  }
  // Stored rows are vision features (ne[0] = text width); the matmul wants rows of outputs.
  if (t->type == DType::kF16) {
    const auto* src = reinterpret_cast<const uint16_t*>(t->data);  // ne[0] = n values per row
    p->proj_f16_.resize(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t o = 0; o < n; ++o) p->proj_f16_[static_cast<size_t>(o * d + i)] = src[i * n + o];
    }
    p->proj_ = ops::WeightView{.dtype = DType::kF16, .n = n, .k = d, .data = p->proj_f16_.data(),
                               .row_bytes = static_cast<size_t>(d) * sizeof(uint16_t)};
  } else if (t->type == DType::kF32) {
    VLMD_ASSIGN_OR_RETURN(std::vector<float> w, GetF32(f, "mm.input_projection.weight", {n, d}));
    p->proj_f32_.resize(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t o = 0; o < n; ++o) p->proj_f32_[static_cast<size_t>(o * d + i)] = w[static_cast<size_t>(i * n + o)];
    }
    p->proj_ = ops::WeightView{.dtype = DType::kF32, .n = n, .k = d, .data = p->proj_f32_.data(),
                               .row_bytes = static_cast<size_t>(d) * sizeof(float)};
  } else {
    return UnimplementedError("mm.input_projection.weight of type " + std::string(DTypeName(t->type)) +
                              " (F32 or F16 are supported)");
  }
  VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, &p->proj_, &p->packed_));
  return p;
}

Status Gemma3Projector::Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles,
                                VisionContext* ctx, float* out) const {
  const VisionConfig& c = vit.config();
  const int64_t d = c.d_model, npos = vit.n_positions(), side = c.patches_per_side();
  const int64_t ntok = tokens_per_tile(vit), rows = n_tiles * ntok;
  GrowScratch(ctx->proj_in, rows * d);
  for (int64_t t = 0; t < n_tiles; ++t) {
    AveragePool(vit_out + t * npos * d, side, d, c.scale_factor, ctx->proj_in.data() + t * ntok * d);
  }
  const kernels::KernelTable& kt = *ctx->kernels;
  VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, ctx->pool, ctx->proj_in.data(), norm_w_.data(), ctx->proj_in.data(),
                                    rows, d, c.eps));
  return ops::MatMul(kt, ctx->pool, proj_, ctx->proj_in.data(), rows, d, out, proj_.n, &ctx->matmul_scratch);
}

}  // namespace vlmd::engine::models
