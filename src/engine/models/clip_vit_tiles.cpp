// The ViT blocks in fast precision on the AMX tile unit (see clip_vit.h): between the tile
// products the activations stay bf16 rows, written by the product before them (its epilogue
// adds the bias, applies the activation and rounds to bf16 while each 16 x 16 block is in L1),
// so no pass converts f32 activations and no f32 intermediate goes through memory. Only the
// residual stream x stays f32: LayerNorm reads it and writes bf16 rows, the output projection and
// the FFN's down projection add into it (with their biases) in their epilogues.
#include <algorithm>
#include <cmath>

#include "engine/models/clip_vit.h"
#include "engine/ops/activation.h"
#include "engine/ops/norm.h"
#include "engine/ops/parallel.h"

namespace vlmd::engine::models {
namespace {

int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// A bf16 buffer of `rows` rows of `stride` values whose rows [valid, rows) are zero (tile loads
// read whole 16-row tiles; the padding rows only feed outputs that are never written).
uint16_t* Bf16Rows(Bf16Buffer* buf, int64_t rows, int64_t valid, int64_t stride) {
  buf->resize(static_cast<size_t>(rows * stride));
  std::fill(buf->data() + valid * stride, buf->data() + rows * stride, uint16_t{0});
  return buf->data();
}

// Zeroes columns [width, width rounded up to 32) of rows [0, rows): the tile products read whole
// 32-value steps, and the weights' padding is zero only where the activations' is too (a NaN
// left there by an earlier call would still poison the sums).
void ZeroPadColumns(uint16_t* buf, int64_t rows, int64_t stride, int64_t width) {
  const int64_t padded = kernels::TileBf16Matrix::PaddedK(width);
  if (padded == width) return;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(buf + r * stride + width, buf + r * stride + padded, uint16_t{0});
  }
}

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

float ClipVit::TileQueryScale(int64_t head_dim) {
  return 1.44269504f / std::sqrt(static_cast<float>(head_dim));  // log2(e) / sqrt(head_dim)
}

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

// Attention from bf16 Q (pre-scaled by log2(e) / sqrt(head_dim)), K and V rows [n, ld] to bf16
// output rows: one job per (tile, head). K and V of the head are packed once as tile operands (K
// as the columns of the score product, V^T as those of the output product; head_dim and n_pos
// padded with zeros to whole 32-value tile steps), then the fused kernel runs every query
// (kernels::TileAttentionArgs: scores and probabilities of 32 queries x 128 keys at a time, in L1).
Status ClipVit::AttendTiles(int64_t n_tiles, VisionContext* ctx) const {
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, npos = n_positions_, hd = c.head_dim, heads = c.n_heads;
  const int64_t ld = kernels::TileRowStride(d);
  const int64_t hd_pad = kernels::TileBf16Matrix::PaddedK(hd);
  const int64_t npos_pad = kernels::TileBf16Matrix::PaddedK(npos);
  // A head's queries are read in place when they fill whole tile steps; otherwise (head_dim not a
  // multiple of 32) they are copied with zero padding, since the next head's values follow.
  const bool q_in_place = hd == hd_pad;
  const int64_t q_rows = RoundUp(npos, 32);  // the kernel reads whole 32-row blocks
  const kernels::KernelTable& kt = *ctx->kernels;
  const kernels::TilePackFn pack_rows = kt.tile_pack_rows != nullptr
                                            ? kt.tile_pack_rows
                                            : &kernels::TileBf16Matrix::PackRows;
  const kernels::TilePackFn pack_columns = kt.tile_pack_columns != nullptr
                                               ? kt.tile_pack_columns
                                               : &kernels::TileBf16Matrix::PackColumns;
  const size_t o_block_bytes = static_cast<size_t>(32 * (hd_pad + 16)) * sizeof(float);
  const int workers = ctx->pool != nullptr ? ctx->pool->size() : 1;
  ctx->attention_work.resize(static_cast<size_t>(workers));
  for (auto& w : ctx->attention_work) {
    if (!q_in_place) {
      w.q_bf16.resize(static_cast<size_t>(q_rows * hd_pad));
      std::fill(w.q_bf16.data(), w.q_bf16.data() + q_rows * hd_pad, uint16_t{0});
    }
    w.k_tiles.resize(kernels::TileBf16Matrix::PanelElements(npos, hd_pad));
    w.v_tiles.resize(kernels::TileBf16Matrix::PanelElements(hd, npos_pad));
    w.o_block.Reserve(o_block_bytes);
  }
  return ops::internal::ForJobs(ctx->pool, n_tiles * heads, [&](int64_t job, int worker) {
    const int64_t h = job % heads, r0 = (job / heads) * npos;
    VisionContext::AttentionWork& w = ctx->attention_work[static_cast<size_t>(worker)];
    const int64_t head_offset = r0 * ld + h * hd;
    pack_rows(ctx->k16.data() + head_offset, ld, npos, hd, hd_pad, w.k_tiles.data());
    pack_columns(ctx->v16.data() + head_offset, ld, hd, npos, npos_pad, w.v_tiles.data());
    kernels::TileAttentionArgs args{.q = ctx->q16.data() + head_offset, .ldq = ld,
                                    .k_tiles = w.k_tiles.data(), .v_tiles = w.v_tiles.data(),
                                    .v_k = npos_pad, .n_q = npos, .n_kv = npos, .hd = hd,
                                    .hd_pad = hd_pad, .out = ctx->attn16.data() + head_offset,
                                    .ldo = ld,
                                    .o_scratch = reinterpret_cast<float*>(
                                        w.o_block.Reserve(o_block_bytes))};
    if (!q_in_place) {  // rows past npos stay zero from the resize above
      for (int64_t i = 0; i < npos; ++i) {
        std::copy_n(args.q + i * ld, hd, w.q_bf16.data() + i * hd_pad);
      }
      args.q = w.q_bf16.data();
      args.ldq = hd_pad;
    }
    kt.tile_attention(args);
    return Status::Ok();
  });
}

Status ClipVit::RunTileBlocks(int64_t n_tiles, VisionContext* ctx) const {
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, ff = c.d_ff, n = n_tiles * n_positions_;
  const int64_t ld = kernels::TileRowStride(d), ld_ff = kernels::TileRowStride(ff);
  // Whole tiles of rows, plus 32 for the attention's in-place query reads, which start at any
  // row and read whole blocks of 32.
  const int64_t rows = RoundUp(n, kernels::kTileRows) + 32;
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
