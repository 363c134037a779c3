// The ViT blocks in fast precision on the AMX tile unit (see clip_vit.h): between the tile
// products the activations stay bf16 rows, written by the product before them (its epilogue
// adds the bias, applies the activation and rounds to bf16 while each 16 x 16 block is in L1),
// so no pass converts f32 activations and no f32 intermediate goes through memory. Only the
// residual stream x stays f32: LayerNorm reads it and writes bf16 rows, the output projection and
// the FFN's down projection add into it (with their biases) in their epilogues.
#include <algorithm>
#include <cmath>

#include "engine/models/clip_vit.h"
#include "engine/models/vit_attention.h"
#include "engine/models/vit_tiles.h"
#include "engine/ops/activation.h"
#include "engine/ops/norm.h"
#include "engine/ops/parallel.h"

namespace vlmd::engine::models {
namespace {

const float* OrNull(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// The FFN activation of the tile blocks: its output is rounded to bf16, so a cheaper form
// accurate to 1e-4 serves where the table has one.
kernels::UnaryFn TileBlockActivation(const kernels::KernelTable& kt, ops::Activation act) {
  if (act == ops::Activation::kGeluTanh && kt.gelu_tanh_for_bf16 != nullptr) {
    return kt.gelu_tanh_for_bf16;
  }
  return ops::ActivationKernel(kt, act);
}

}  // namespace

float ClipVit::TileQueryScale(int64_t head_dim) { return models::TileQueryScale(head_dim); }

bool ClipVit::UsesTileBlocks(const kernels::KernelTable& kt) const {
  if (!fast_ || kt.tile_bf16_matmul == nullptr || kt.to_bf16 == nullptr ||
      kt.tile_attention == nullptr || TileBlockActivation(kt, config_.ffn_act) == nullptr) {
    return false;
  }
  for (const Layer& L : layers_) {
    for (const ops::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_up, &L.w_down}) {
      if (w->tiles == nullptr) return false;
    }
  }
  return true;
}

// Attention on tiles of every tile of the image: each tile's rows are one span.
Status ClipVit::AttendTiles(int64_t n_tiles, VisionContext* ctx) const {
  std::vector<RowSpan> spans(static_cast<size_t>(n_tiles));
  for (int64_t t = 0; t < n_tiles; ++t) spans[static_cast<size_t>(t)] = {t * n_positions_, n_positions_};
  return VitSpanAttentionTiles(ctx, spans, config_.d_model, config_.n_heads, config_.head_dim);
}

Status ClipVit::RunTileBlocks(int64_t n_tiles, VisionContext* ctx) const {
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, ff = c.d_ff, n = n_tiles * n_positions_;
  const int64_t ld = kernels::TileRowStride(d), ld_ff = kernels::TileRowStride(ff);
  // Whole tiles of rows, plus 32 for the attention's in-place query reads, which start at any
  // row and read whole blocks of 32.
  const int64_t rows = RoundUpTo(n, kernels::kTileRows) + 32;
  uint16_t* xn16 = Bf16Rows(&ctx->xn16, rows, n, ld);     // LayerNorm output
  uint16_t* q16 = Bf16Rows(&ctx->q16, rows, n, ld);
  uint16_t* k16 = Bf16Rows(&ctx->k16, rows, n, ld);
  uint16_t* v16 = Bf16Rows(&ctx->v16, rows, n, ld);
  uint16_t* attn16 = Bf16Rows(&ctx->attn16, rows, n, ld);
  uint16_t* ff16 = Bf16Rows(&ctx->ff16, rows, n, ld_ff);  // FFN hidden after the activation
  // The products' inputs of widths that are not whole tile steps (e.g. SigLIP-so400m's
  // d_ff = 4304): nothing writes their padding columns, so zero them once per call.
  ZeroPadColumns(xn16, n, ld, d);
  ZeroPadColumns(attn16, n, ld, d);
  ZeroPadColumns(ff16, n, ld_ff, ff);
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  float* x = ctx->x.data();
  const float q_scale = TileQueryScale(c.head_dim);
  auto product = [&](const ops::WeightView& w, kernels::TileBf16Args args) {
    return ops::TileMatMul(kt, pool, *w.tiles, args, n);
  };
  auto to_bf16 = [](const uint16_t* a, int64_t lda, uint16_t* out, int64_t ldo, const float* b) {
    return kernels::TileBf16Args{.a = a, .lda = lda, .bias = b, .out_bf16 = out, .ldo_bf16 = ldo};
  };
  auto add_to_x = [&](const uint16_t* a, int64_t lda, const float* b) {
    return kernels::TileBf16Args{.a = a, .lda = lda, .out = x, .ldo = d, .accumulate = true,
                                 .bias = b};
  };
  for (const Layer& L : layers_) {
    VLMD_RETURN_IF_ERROR(ops::LayerNormToBf16(kt, pool, x, L.ln1_w.data(), OrNull(L.ln1_b),
                                              xn16, ld, n, d, c.eps));
    kernels::TileBf16Args q_args = to_bf16(xn16, ld, q16, ld, OrNull(L.bq_scaled));
    q_args.scale = q_scale;  // (x Wq^T + bq) log2(e) / sqrt(head_dim): bq_scaled = bq * q_scale
    VLMD_RETURN_IF_ERROR(product(L.wq, q_args));
    VLMD_RETURN_IF_ERROR(product(L.wk, to_bf16(xn16, ld, k16, ld, OrNull(L.bk))));
    VLMD_RETURN_IF_ERROR(product(L.wv, to_bf16(xn16, ld, v16, ld, OrNull(L.bv))));
    VLMD_RETURN_IF_ERROR(AttendTiles(n_tiles, ctx));
    VLMD_RETURN_IF_ERROR(product(L.wo, add_to_x(attn16, ld, OrNull(L.bo))));
    VLMD_RETURN_IF_ERROR(ops::LayerNormToBf16(kt, pool, x, L.ln2_w.data(), OrNull(L.ln2_b),
                                              xn16, ld, n, d, c.eps));
    kernels::TileBf16Args up_args = to_bf16(xn16, ld, ff16, ld_ff, OrNull(L.b_up));
    up_args.act = TileBlockActivation(kt, c.ffn_act);
    VLMD_RETURN_IF_ERROR(product(L.w_up, up_args));
    VLMD_RETURN_IF_ERROR(product(L.w_down, add_to_x(ff16, ld_ff, OrNull(L.b_down))));
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::models
