// ViT span attention (see vit_attention.h): two f32 GEMMs per (span, head, query block):
// scores = Q_h K_h^T, softmax per row, out_h = P V_h. The score block is [kQueryBlock, span], so
// memory stays bounded at any span length; the GEMMs run at the matmul kernels' rate where a
// per-query dot over f16 rows would be bound by horizontal sums and conversions.
#include "engine/models/vit_attention.h"

#include <algorithm>
#include <vector>

#include "engine/kernels/tile_bf16.h"
#include "engine/ops/matmul.h"
#include "engine/ops/parallel.h"

namespace vlmd::engine::models {
Status VitSpanAttention(VisionContext* ctx, std::span<const RowSpan> spans, int64_t d_model,
                        int64_t n_heads, int64_t head_dim, float scale) {
  constexpr int64_t kQueryBlock = 1024;
  if (ctx == nullptr || ctx->kernels == nullptr || n_heads < 1 || head_dim < 1 ||
      n_heads * head_dim != d_model) {
    return InvalidArgumentError("vit attention: bad shape or context");
  }
  int64_t max_len = 0, n_rows = 0;
  for (const RowSpan& s : spans) {
    if (s.len < 1 || s.start < 0) return InvalidArgumentError("vit attention: empty span");
    max_len = std::max(max_len, s.len);
    n_rows = std::max(n_rows, s.start + s.len);
  }
  if (static_cast<int64_t>(ctx->q.size()) < n_rows * d_model ||
      static_cast<int64_t>(ctx->k.size()) < n_rows * d_model ||
      static_cast<int64_t>(ctx->v.size()) < n_rows * d_model) {
    return InvalidArgumentError("vit attention: q/k/v hold fewer rows than the spans cover");
  }
  GrowScratch(ctx->attn, n_rows * d_model);
  const kernels::KernelTable& kt = *ctx->kernels;
  const int64_t hd = head_dim, d = d_model;
  const int workers = ctx->pool != nullptr ? ctx->pool->size() : 1;
  ctx->attention_work.resize(static_cast<size_t>(workers));
  for (auto& w : ctx->attention_work) {
    GrowScratch(w.k_head, max_len * hd);
    GrowScratch(w.v_head_t, hd * max_len);
    GrowScratch(w.v_head, max_len * hd);
    GrowScratch(w.scores, std::min(kQueryBlock, max_len) * max_len);
  }
  // Jobs: (span, head, query block), enumerated through a prefix sum of each span's blocks.
  std::vector<int64_t> first_job(spans.size() + 1, 0);
  for (size_t i = 0; i < spans.size(); ++i) {
    first_job[i + 1] = first_job[i] + n_heads * ((spans[i].len + kQueryBlock - 1) / kQueryBlock);
  }
  return ops::internal::ForJobs(ctx->pool, first_job.back(), [&](int64_t job, int worker) {
    const size_t si = static_cast<size_t>(
        std::upper_bound(first_job.begin(), first_job.end(), job) - first_job.begin() - 1);
    const RowSpan& span = spans[si];
    const int64_t q_blocks = (span.len + kQueryBlock - 1) / kQueryBlock;
    const int64_t local = job - first_job[si];
    const int64_t qb = local % q_blocks, h = local / q_blocks;
    const int64_t r0 = span.start, npos = span.len;
    const int64_t q0 = qb * kQueryBlock, nq = std::min(kQueryBlock, npos - q0);
    VisionContext::AttentionWork& w = ctx->attention_work[static_cast<size_t>(worker)];
    // llama.cpp's encoder runs flash attention: K and V are cast to F16, Q is rounded to F16
    // for the K.Q products (F32 accumulation). The f16 values are exact in f32, so the GEMMs
    // below multiply exactly those numbers. Each job rounds its own Q slice and its copies.
    for (int64_t j = 0; j < npos; ++j) {
      kt.round_f16(ctx->k.data() + (r0 + j) * d + h * hd, w.k_head.data() + j * hd, hd);
      kt.round_f16(ctx->v.data() + (r0 + j) * d + h * hd, w.v_head.data() + j * hd, hd);
    }
    for (int64_t i = 0; i < nq; ++i) {
      float* qr = ctx->q.data() + (r0 + q0 + i) * d + h * hd;
      kt.round_f16(qr, qr, hd);
    }
    // V^T in 16-row blocks: each block's reads stay in a few cache lines per row.
    for (int64_t j0 = 0; j0 < npos; j0 += 16) {
      const int64_t j1 = std::min(npos, j0 + 16);
      for (int64_t e = 0; e < hd; ++e) {
        float* dst = w.v_head_t.data() + e * npos;
        for (int64_t j = j0; j < j1; ++j) dst[j] = w.v_head[j * hd + e];
      }
    }
    const ops::WeightView k_view{DType::kF32, npos, hd, w.k_head.data(), 0};
    const ops::WeightView v_view{DType::kF32, hd, npos, w.v_head_t.data(), 0};
    Status s = ops::MatMul(kt, nullptr, k_view, ctx->q.data() + (r0 + q0) * d + h * hd, nq, d,
                           w.scores.data(), npos, nullptr);
    for (int64_t i = 0; s.ok() && i < nq; ++i) {
      float* row = w.scores.data() + i * npos;
      for (int64_t j = 0; j < npos; ++j) row[j] *= scale;
      kt.softmax(row, npos);
    }
    if (s.ok()) {
      s = ops::MatMul(kt, nullptr, v_view, w.scores.data(), nq, npos,
                      ctx->attn.data() + (r0 + q0) * d + h * hd, d, nullptr);
    }
    return s;
  });
}

Status VitSpanAttentionTiles(VisionContext* ctx, std::span<const RowSpan> spans, int64_t d_model,
                             int64_t n_heads, int64_t head_dim) {
  if (ctx == nullptr || ctx->kernels == nullptr || n_heads < 1 || head_dim < 1 ||
      n_heads * head_dim != d_model) {
    return InvalidArgumentError("vit tile attention: bad shape or context");
  }
  const kernels::KernelTable& kt = *ctx->kernels;
  if (kt.tile_attention == nullptr) return UnimplementedError("vit tile attention: no tile kernel");
  int64_t max_len = 0;
  for (const RowSpan& s : spans) {
    if (s.len < 1 || s.start < 0) return InvalidArgumentError("vit tile attention: empty span");
    max_len = std::max(max_len, s.len);
  }
  const int64_t d = d_model, hd = head_dim;
  const int64_t ld = kernels::TileRowStride(d);
  const int64_t hd_pad = kernels::TileBf16Matrix::PaddedK(hd);
  const int64_t max_pad = kernels::TileBf16Matrix::PaddedK(max_len);
  // A head's queries are read in place when they fill whole tile steps; otherwise (head_dim not a
  // multiple of 32) they are copied with zero padding, since the next head's values follow.
  const bool q_in_place = hd == hd_pad;
  const int64_t q_rows = (max_len + 31) / 32 * 32;  // the kernel reads whole 32-row blocks
  const kernels::TilePackFn pack_rows =
      kt.tile_pack_rows != nullptr ? kt.tile_pack_rows : &kernels::TileBf16Matrix::PackRows;
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
    w.k_tiles.resize(kernels::TileBf16Matrix::PanelElements(max_len, hd_pad));
    w.v_tiles.resize(kernels::TileBf16Matrix::PanelElements(hd, max_pad));
    w.o_block.Reserve(o_block_bytes);
  }
  const int64_t jobs = static_cast<int64_t>(spans.size()) * n_heads;
  return ops::internal::ForJobs(ctx->pool, jobs, [&](int64_t job, int worker) {
    const RowSpan& span = spans[static_cast<size_t>(job / n_heads)];
    const int64_t h = job % n_heads, npos = span.len;
    const int64_t npos_pad = kernels::TileBf16Matrix::PaddedK(npos);
    VisionContext::AttentionWork& w = ctx->attention_work[static_cast<size_t>(worker)];
    const int64_t head_offset = span.start * ld + h * hd;
    pack_rows(ctx->k16.data() + head_offset, ld, npos, hd, hd_pad, w.k_tiles.data());
    pack_columns(ctx->v16.data() + head_offset, ld, hd, npos, npos_pad, w.v_tiles.data());
    kernels::TileAttentionArgs args{.q = ctx->q16.data() + head_offset, .ldq = ld,
                                    .k_tiles = w.k_tiles.data(), .v_tiles = w.v_tiles.data(),
                                    .v_k = npos_pad, .n_q = npos, .n_kv = npos, .hd = hd,
                                    .hd_pad = hd_pad, .out = ctx->attn16.data() + head_offset,
                                    .ldo = ld,
                                    .o_scratch = reinterpret_cast<float*>(
                                        w.o_block.Reserve(o_block_bytes))};
    if (!q_in_place) {  // rows past npos: zero from the resize above, or an earlier span's
      std::fill(w.q_bf16.data(), w.q_bf16.data() + (npos + 31) / 32 * 32 * hd_pad, uint16_t{0});
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

}  // namespace vlmd::engine::models
