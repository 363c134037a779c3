// Gemma 3 projector (see projector_gemma3.h).
#include "engine/models/projector_gemma3.h"

#include <algorithm>

#include "engine/models/weights.h"
#include "engine/ops/norm.h"

namespace vlmd::engine::models {
namespace {

// The [d rows of n] matrix `t` (F32 or F16 elements T) as [n rows of d] in *storage, unchanged
// element bits (an F16 projection stays F16, as llama.cpp's transposed copy does).
template <typename T>
ops::WeightView Transposed(const gguf::TensorInfo& t, int64_t n, int64_t d, std::vector<uint8_t, LargeAllocator<uint8_t>>* storage) {
  storage->resize(static_cast<size_t>(n * d) * sizeof(T));
  const auto* src = reinterpret_cast<const T*>(t.data);
  auto* dst = reinterpret_cast<T*>(storage->data());
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t o = 0; o < n; ++o) dst[o * d + i] = src[i * n + o];
  }
  return ops::WeightView{.dtype = t.type, .n = n, .k = d, .data = storage->data(),
                         .row_bytes = static_cast<size_t>(d) * sizeof(T), .name = t.name};
}

}  // namespace

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
    p->proj_ = Transposed<uint16_t>(*t, n, d, &p->proj_bytes_);
  } else if (t->type == DType::kF32) {
    p->proj_ = Transposed<float>(*t, n, d, &p->proj_bytes_);
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
