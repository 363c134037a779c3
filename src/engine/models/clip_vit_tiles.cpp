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

// Row stride of bf16 activation rows: one cache line longer than the row, so that the 16 rows of
// an A tile do not map to the same L1 sets when a row is a multiple of 4 KiB.
int64_t Bf16Stride(int64_t width) { return width + 32; }

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

bool ClipVit::UsesTileBlocks(const kernels::KernelTable& kt) const {
  if (!fast_ || kt.tile_bf16_matmul == nullptr || kt.to_bf16 == nullptr ||
      kt.softmax_exp_bf16 == nullptr || TileBlockActivation(kt, config_.ffn_act) == nullptr) {
    return false;
  }
  for (const Layer& L : layers_) {
    for (const ops::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_up, &L.w_down}) {
      if (w->tiles == nullptr) return false;
    }
  }
  return true;
}

// Attention from bf16 Q (pre-scaled by 1/sqrt(head_dim)), K and V rows [n, ld] to bf16 output
// rows: one job per (tile, head). K and V of the head are packed once as tile operands (K as the
// columns of the score product, V^T as those of the output product; head_dim and n_pos padded
// with zeros to whole 32-value tile steps), then the queries run in blocks of kQueryBlock rows so
// that the score block stays in L2. Probabilities are exp(s - max) rounded to bf16; each output
// row is divided by its row's sum in the product's epilogue.
Status ClipVit::AttendTiles(int64_t n_tiles, VisionContext* ctx) const {
  constexpr int64_t kQueryBlock = 128;
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, npos = n_positions_, hd = c.head_dim, heads = c.n_heads;
  const int64_t ld = Bf16Stride(d);
  const int64_t hd_pad = RoundUp(hd, kernels::kTileK), npos_pad = RoundUp(npos, kernels::kTileK);
  const int64_t block_rows = std::min(kQueryBlock, npos);
  const int64_t rows_pad = RoundUp(block_rows, kernels::kTileRows);
  const int64_t k_panels = (npos + kernels::kTileCols - 1) / kernels::kTileCols;
  const int64_t v_panels = (hd + kernels::kTileCols - 1) / kernels::kTileCols;
  // Row strides one cache line longer than the rows: 1024 scores (4 KiB) or probabilities per row
  // would put the 16 rows of a tile in the same L1 sets (measured 1.3-1.6x on the score product).
  const int64_t s_stride = npos + 16, p_stride = npos_pad + 32;
  // A head's queries are read in place when they fill whole tile steps; otherwise (head_dim not a
  // multiple of 32) each block is copied with zero padding, since the next head's values follow.
  const bool q_in_place = hd == hd_pad;
  const kernels::KernelTable& kt = *ctx->kernels;
  const kernels::TilePackFn pack_rows = kt.tile_pack_rows != nullptr
                                            ? kt.tile_pack_rows
                                            : &kernels::TileBf16Matrix::PackRows;
  const kernels::TilePackFn pack_columns = kt.tile_pack_columns != nullptr
                                               ? kt.tile_pack_columns
                                               : &kernels::TileBf16Matrix::PackColumns;
  const int workers = ctx->pool != nullptr ? ctx->pool->size() : 1;
  ctx->attention_work.resize(static_cast<size_t>(workers));
  for (auto& w : ctx->attention_work) {
    if (static_cast<int64_t>(w.scores.size()) < block_rows * s_stride) {
      w.scores.resize(static_cast<size_t>(block_rows * s_stride));
    }
    if (static_cast<int64_t>(w.row_scale.size()) < block_rows) {
      w.row_scale.resize(static_cast<size_t>(block_rows));
    }
    if (!q_in_place) w.q_bf16.resize(static_cast<size_t>(rows_pad * hd_pad));
    w.k_tiles.resize(kernels::TileBf16Matrix::PanelElements(npos, hd_pad));
    w.v_tiles.resize(kernels::TileBf16Matrix::PanelElements(hd, npos_pad));
    w.p_bf16.resize(static_cast<size_t>(rows_pad * p_stride));
  }
  return ops::internal::ForJobs(ctx->pool, n_tiles * heads, [&](int64_t job, int worker) {
    const int64_t h = job % heads, r0 = (job / heads) * npos;
    VisionContext::AttentionWork& w = ctx->attention_work[static_cast<size_t>(worker)];
    const int64_t head_offset = r0 * ld + h * hd;
    pack_rows(ctx->k16.data() + head_offset, ld, npos, hd, hd_pad, w.k_tiles.data());
    pack_columns(ctx->v16.data() + head_offset, ld, hd, npos, npos_pad, w.v_tiles.data());
    for (int64_t q0 = 0; q0 < npos; q0 += kQueryBlock) {
      const int64_t nq = std::min(kQueryBlock, npos - q0);
      const int64_t nq_pad = RoundUp(nq, kernels::kTileRows);
      const uint16_t* q = ctx->q16.data() + head_offset + q0 * ld;
      kernels::TileBf16Args qk{.a = q, .lda = ld, .w = w.k_tiles.data(), .n = npos, .k = hd_pad,
                               .out = w.scores.data(), .ldo = s_stride};
      if (!q_in_place) {
        std::fill(w.q_bf16.data(), w.q_bf16.data() + nq_pad * hd_pad, uint16_t{0});
        for (int64_t i = 0; i < nq; ++i) {
          std::copy_n(q + i * ld, hd, w.q_bf16.data() + i * hd_pad);
        }
        qk.a = w.q_bf16.data();
        qk.lda = hd_pad;
      }
      kt.tile_bf16_matmul(qk, 0, nq, 0, k_panels);
      // Rows up to the next whole tile are read by the output product: zero the padding rows,
      // and the padding columns of each row.
      std::fill(w.p_bf16.data() + nq * p_stride, w.p_bf16.data() + nq_pad * p_stride,
                uint16_t{0});
      for (int64_t i = 0; i < nq; ++i) {
        uint16_t* pb = w.p_bf16.data() + i * p_stride;
        const float sum = kt.softmax_exp_bf16(w.scores.data() + i * s_stride, pb, npos);
        // A NaN sum (NaN scores) stays NaN and is caught by the encoder's final check.
        w.row_scale[static_cast<size_t>(i)] = sum > 0.0f || std::isnan(sum) ? 1.0f / sum : 0.0f;
        std::fill(pb + npos, pb + npos_pad, uint16_t{0});
      }
      const kernels::TileBf16Args pv{.a = w.p_bf16.data(), .lda = p_stride,
                                     .w = w.v_tiles.data(), .n = hd, .k = npos_pad,
                                     .row_scale = w.row_scale.data(),
                                     .out_bf16 = ctx->attn16.data() + head_offset + q0 * ld,
                                     .ldo_bf16 = ld};
      kt.tile_bf16_matmul(pv, 0, nq, 0, v_panels);
    }
    return Status::Ok();
  });
}

Status ClipVit::RunTileBlocks(int64_t n_tiles, VisionContext* ctx) const {
  const VisionConfig& c = config_;
  const int64_t d = c.d_model, ff = c.d_ff, n = n_tiles * n_positions_;
  const int64_t ld = Bf16Stride(d), ld_ff = Bf16Stride(ff);
  // Whole tiles of rows, plus one more for the attention's in-place query reads, which start at
  // any row of a tile.
  const int64_t rows = RoundUp(n, kernels::kTileRows) + kernels::kTileRows;
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
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
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
    q_args.scale = q_scale;  // (x Wq^T + bq) / sqrt(head_dim), with bq_scaled = bq / sqrt(...)
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
