// The Qwen VL blocks in fast precision on the AMX tile unit (see qwen_vit.h), as the SigLIP
// blocks of clip_vit_tiles.cpp: bf16 activation rows between the tile products (each product's
// epilogue adds its bias, applies the activation and rounds while a block is in L1), the
// residual stream f32. Two differences: q and k leave their products as f32 rows, get the 2-D
// RoPE there and are rounded to bf16 after (the queries scaled for the tile attention), and the
// attention runs within the layer's spans (2.5-VL windows, or the whole image).
#include <algorithm>
#include <cmath>

#include "engine/models/qwen_vit.h"
#include "engine/models/vit_attention.h"
#include "engine/models/vit_tiles.h"
#include "engine/ops/activation.h"
#include "engine/ops/norm.h"
#include "engine/ops/rope.h"

namespace vlmd::engine::models {
namespace {

const float* OrNull(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

bool QwenVit::UsesTileBlocks(const kernels::KernelTable& kt) const {
  if (!fast_ || kt.tile_bf16_matmul == nullptr || kt.to_bf16 == nullptr ||
      kt.tile_attention == nullptr || ops::ActivationKernel(kt, config_.ffn_act) == nullptr) {
    return false;
  }
  for (const Layer& L : layers_) {
    for (const ops::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_up, &L.w_down}) {
      if (w->tiles == nullptr) return false;
    }
    if (L.w_gate.data != nullptr && L.w_gate.tiles == nullptr) return false;
  }
  return true;
}

Status QwenVit::RunLayerTiles(int32_t l, State* st, VisionContext* ctx) const {
  const VisionConfig& c = config_;
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  const int64_t n = st->n;
  const int64_t d = c.d_model, hd = c.head_dim, ff = c.d_ff;
  const int64_t ld = kernels::TileRowStride(d), ld_ff = kernels::TileRowStride(ff);
  // Whole tiles of rows, plus 32 for the attention's in-place query reads.
  const int64_t rows = RoundUpTo(n, kernels::kTileRows) + 32;
  uint16_t* xn16 = Bf16Rows(&ctx->xn16, rows, n, ld);
  uint16_t* q16 = Bf16Rows(&ctx->q16, rows, n, ld);
  uint16_t* k16 = Bf16Rows(&ctx->k16, rows, n, ld);
  uint16_t* v16 = Bf16Rows(&ctx->v16, rows, n, ld);
  uint16_t* attn16 = Bf16Rows(&ctx->attn16, rows, n, ld);
  uint16_t* ff16 = Bf16Rows(&ctx->ff16, rows, n, ld_ff);
  ZeroPadColumns(xn16, n, ld, d);
  ZeroPadColumns(q16, n, ld, d);
  ZeroPadColumns(k16, n, ld, d);
  ZeroPadColumns(attn16, n, ld, d);
  ZeroPadColumns(ff16, n, ld_ff, ff);
  Grow(ctx->q, n * d);
  Grow(ctx->k, n * d);
  Grow(ctx->xn, n * d);
  float* x = st->x.data();
  auto product = [&](const ops::WeightView& w, kernels::TileBf16Args args) {
    return ops::TileMatMul(kt, pool, *w.tiles, args, n);
  };
  auto to_bf16 = [](const uint16_t* a, int64_t lda, uint16_t* out, int64_t ldo, const float* b) {
    return kernels::TileBf16Args{.a = a, .lda = lda, .bias = b, .out_bf16 = out, .ldo_bf16 = ldo};
  };
  auto to_f32 = [](const uint16_t* a, int64_t lda, float* out, int64_t ldo, const float* b) {
    return kernels::TileBf16Args{.a = a, .lda = lda, .out = out, .ldo = ldo, .bias = b};
  };
  auto add_to_x = [&](const uint16_t* a, int64_t lda, const float* b) {
    return kernels::TileBf16Args{.a = a, .lda = lda, .out = x, .ldo = d, .accumulate = true,
                                 .bias = b};
  };
  // The block's norm into bf16 rows: LayerNorm in one pass; RMSNorm (2.5-VL) in f32, then rounded.
  auto norm_to_bf16 = [&](const std::vector<float>& w, const std::vector<float>& b) -> Status {
    if (!rms_norm_) {
      return ops::LayerNormToBf16(kt, pool, x, w.data(), OrNull(b), xn16, ld, n, d, c.eps);
    }
    VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, x, w.data(), ctx->xn.data(), n, d, c.eps));
    for (int64_t r = 0; r < n; ++r) kt.to_bf16(ctx->xn.data() + r * d, xn16 + r * ld, d);
    return Status::Ok();
  };
  const Layer& L = layers_[static_cast<size_t>(l)];
  VLMD_RETURN_IF_ERROR(norm_to_bf16(L.ln1_w, L.ln1_b));
  VLMD_RETURN_IF_ERROR(product(L.wq, to_f32(xn16, ld, ctx->q.data(), d, OrNull(L.bq))));
  VLMD_RETURN_IF_ERROR(product(L.wk, to_f32(xn16, ld, ctx->k.data(), d, OrNull(L.bk))));
  VLMD_RETURN_IF_ERROR(product(L.wv, to_bf16(xn16, ld, v16, ld, OrNull(L.bv))));
  VLMD_RETURN_IF_ERROR(ops::RopeWithTable(kt, pool, ctx->q.data(), n, c.n_heads, hd, 0,
                                          st->rope.data(), hd, /*neox=*/true));
  VLMD_RETURN_IF_ERROR(ops::RopeWithTable(kt, pool, ctx->k.data(), n, c.n_heads, hd, 0,
                                          st->rope.data(), hd, /*neox=*/true));
  const float q_scale = TileQueryScale(hd);
  for (int64_t r = 0; r < n; ++r) {
    float* qr = ctx->q.data() + r * d;
    for (int64_t i = 0; i < d; ++i) qr[i] *= q_scale;
    kt.to_bf16(qr, q16 + r * ld, d);
    kt.to_bf16(ctx->k.data() + r * d, k16 + r * ld, d);
  }
  const RowSpan whole[] = {{0, n}};
  VLMD_RETURN_IF_ERROR(VitSpanAttentionTiles(ctx, AttentionSpans(l, *st, whole), d, c.n_heads, hd));
  VLMD_RETURN_IF_ERROR(product(L.wo, add_to_x(attn16, ld, OrNull(L.bo))));
  VLMD_RETURN_IF_ERROR(norm_to_bf16(L.ln2_w, L.ln2_b));
  if (L.w_gate.data != nullptr) {  // 2.5-VL: down(silu(gate x) * up x), the product in f32
    Grow(ctx->ff, 2 * n * ff);
    float* up = ctx->ff.data();
    float* gate = ctx->ff.data() + n * ff;
    VLMD_RETURN_IF_ERROR(product(L.w_up, to_f32(xn16, ld, up, ff, OrNull(L.b_up))));
    VLMD_RETURN_IF_ERROR(product(L.w_gate, to_f32(xn16, ld, gate, ff, OrNull(L.b_gate))));
    VLMD_RETURN_IF_ERROR(ops::SwiGlu(kt, pool, gate, up, up, n * ff));
    for (int64_t r = 0; r < n; ++r) kt.to_bf16(up + r * ff, ff16 + r * ld_ff, ff);
  } else {
    kernels::TileBf16Args up_args = to_bf16(xn16, ld, ff16, ld_ff, OrNull(L.b_up));
    up_args.act = ops::ActivationKernel(kt, c.ffn_act);
    VLMD_RETURN_IF_ERROR(product(L.w_up, up_args));
  }
  VLMD_RETURN_IF_ERROR(product(L.w_down, add_to_x(ff16, ld_ff, OrNull(L.b_down))));
  return Deepstack(l, st, ctx);
}

}  // namespace vlmd::engine::models
