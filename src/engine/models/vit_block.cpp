// The vision transformer block (see vit_block.h). Numerics of the f32 path follow llama.cpp's
// CPU backend where parity needs it: F16 weights see F16-rounded activations (inside MatMul),
// attention is the encoder's flash-attention arithmetic (AttendF32 below), GELU variants go
// through ggml's 16-bit tables in the exact precision; SiLU of the gated FFN is computed exactly,
// as ggml does.
//
// The tile path (fast precision on AMX): between the tile products the activations stay bf16
// rows, written by the product before them (its epilogue adds the bias, applies the activation
// and rounds to bf16 while each 16 x 16 block is in L1), so no pass converts f32 activations and
// no f32 intermediate goes through memory. Only the residual stream x stays f32: the norm reads
// it and writes bf16 rows, the output projection and the FFN's down projection add into it (with
// their biases) in their epilogues. With RoPE or q/k norms, q and k leave their products as f32
// rows, are normed and rotated there and rounded to bf16 after; the gated FFN's product is formed
// in f32 too.
#include "engine/models/vit_block.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "engine/kernels/tile_bf16.h"
#include "engine/models/weights.h"
#include "engine/ops/norm.h"
#include "engine/ops/parallel.h"
#include "engine/ops/rope.h"

namespace vlmd::engine::models {
namespace {

const float* OrNull(const F32Weights& v) { return v.empty() ? nullptr : v.data(); }

ops::MatmulEpilogue BiasEpilogue(const F32Weights& b) {
  return ops::MatmulEpilogue{OrNull(b), nullptr};
}

// Rows [first, first + n) of a weight view (the q / k / v thirds of a fused qkv matrix).
ops::WeightView RowSlice(const ops::WeightView& w, int64_t first, int64_t n) {
  ops::WeightView s = w;
  s.n = n;
  s.data = static_cast<const uint8_t*>(w.data) + first * static_cast<int64_t>(w.row_bytes);
  return s;
}

int64_t RoundUpTo(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// Layer scale folded into a projection: the matrix `name` [k -> d] as f32 with output row j
// scaled by scale[j] into *storage (w points at it), and the bias scaled alike.
Status FoldLayerScale(const gguf::GgufFile& f, const std::string& name, int64_t k,
                      const F32Weights& scale, ops::WeightView* w, F32Weights* bias,
                      F32WeightsOwnMapping* storage) {
  const int64_t d = static_cast<int64_t>(scale.size());
  VLMD_RETURN_IF_ERROR(GetF32Into(f, name, {k, d}, storage));
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t i = 0; i < k; ++i) (*storage)[static_cast<size_t>(j * k + i)] *= scale[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j < static_cast<int64_t>(bias->size()); ++j) (*bias)[static_cast<size_t>(j)] *= scale[static_cast<size_t>(j)];
  *w = ops::WeightView{.dtype = DType::kF32, .n = d, .k = k, .data = storage->data(),
                       .row_bytes = static_cast<size_t>(k) * sizeof(float),
                       .name = f.FindTensor(name)->name};  // found by GetF32Into
  return Status::Ok();
}

// x += branch, each row scaled by the layer scale first when there is one.
void AddBranch(const float* branch, const F32Weights& scale, int64_t n, int64_t d, float* x) {
  if (scale.empty()) {
    for (int64_t i = 0; i < n * d; ++i) x[i] += branch[i];
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < d; ++i) x[r * d + i] += branch[r * d + i] * scale[static_cast<size_t>(i)];
  }
}

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

// The FFN activation of the fast precision: its output is rounded to bf16 (tile blocks) or,
// mostly, quantized to int8 (the next packed product; an unpacked down projection takes f16 or
// f32 activations), so a cheaper form accurate to 1e-4 serves where the table has one.
kernels::UnaryFn FastActivation(const kernels::KernelTable& kt, ops::Activation act) {
  if (act == ops::Activation::kGeluTanh && kt.gelu_tanh_fast != nullptr) {
    return kt.gelu_tanh_fast;
  }
  return ops::ActivationKernel(kt, act);
}

// y[r] += b for n rows of width d (nothing when b is empty): an RMSNorm's optional bias, added
// after the weight as llama.cpp's build_norm does.
void AddRowBias(const F32Weights& b, int64_t n, int64_t d, float* y) {
  if (b.empty()) return;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < d; ++i) y[r * d + i] += b[static_cast<size_t>(i)];
  }
}

Status Norm(const VitBlockSpec& spec, const kernels::KernelTable& kt, ThreadPool* pool,
            const float* x, const F32Weights& w, const F32Weights& b, float* y,
            int64_t rows) {
  if (spec.norm == VitNorm::kRmsNorm) {
    VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, pool, x, w.data(), y, rows, spec.d_model, spec.eps));
    AddRowBias(b, rows, spec.d_model, y);
    return Status::Ok();
  }
  return ops::LayerNorm(kt, pool, x, w.data(), OrNull(b), y, rows, spec.d_model, spec.eps);
}

// The optional q or k norm of n rows [n, d_model] in place: the block's norm with weight w and no
// bias (llama.cpp's build_norm), over each whole row or each head of it.
Status QkNorm(const VitBlockSpec& spec, const kernels::KernelTable& kt, ThreadPool* pool,
              const F32Weights& w, float* x, int64_t n) {
  if (w.empty()) return Status::Ok();
  const int64_t width = static_cast<int64_t>(w.size());
  const int64_t rows = n * (spec.d_model / width);
  if (spec.norm == VitNorm::kRmsNorm) return ops::RmsNorm(kt, pool, x, w.data(), x, rows, width, spec.eps);
  return ops::LayerNorm(kt, pool, x, w.data(), nullptr, x, rows, width, spec.eps);
}

Status Rope(const VitBlockSpec& spec, const kernels::KernelTable& kt, ThreadPool* pool,
            float* qk, const VitBlockRows& rows) {
  return ops::RopeWithTable(kt, pool, qk, rows.n, spec.n_heads, spec.head_dim, 0, rows.rope,
                            spec.head_dim, /*neox=*/true);
}

// Attention of ctx->q, k, v [n, d_model] into ctx->attn, within the spans. llama.cpp's encoder
// runs flash attention: K and V cast to F16 and Q rounded to F16 (f32 accumulation); rounded in
// place here, the f32 attention multiplies exactly those numbers. In the fast precision, where
// the table has a bf16 attention kernel, the attention runs on it instead, its operands rounded
// to bf16: on AVX2, on AVX-512 without AMX (vdpbf16ps or FMAs; the products stay int8) and on
// arm64 (NEON FMAs), and on AMX for blocks that cannot run on tiles (e.g. InternViT's layer
// scale). On the avx512vnni and avxvnni tables (whose bf16 attention runs on FMAs) its scores
// run on int8 (ops::AttentionArgs::int8_scores).
Status AttendF32(const VitBlockSpec& spec, const VitBlockRows& rows, VisionContext* ctx) {
  const kernels::KernelTable& kt = *ctx->kernels;
  const bool bf16 = spec.fast && ops::Bf16AttentionRuns(kt, spec.head_dim);
  const int64_t values = rows.n * spec.d_model;
  constexpr int64_t kChunk = 1 << 14;
  if (!bf16) {  // (the bf16 kernel rounds its operands itself)
    for (float* buf : {ctx->q.data(), ctx->k.data(), ctx->v.data()}) {
      ops::internal::ForTasks(ctx->pool, (values + kChunk - 1) / kChunk, [&](int64_t c, int) {
        kt.round_f16(buf + c * kChunk, buf + c * kChunk, std::min(kChunk, values - c * kChunk));
      });
    }
  }
  ops::AttentionArgs a;
  a.q = ctx->q.data();
  a.k = ctx->k.data();
  a.v = ctx->v.data();
  a.kv_type = DType::kF32;
  a.out = ctx->attn.data();
  a.n_q = a.n_kv = rows.n;
  a.n_heads = a.n_kv_heads = spec.n_heads;
  a.head_dim = spec.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  a.spans = rows.spans;
  a.kv_scratch = &ctx->attention_scratch;
  a.bf16_tiles = bf16;
  a.int8_scores = bf16;
  return ops::Attention(kt, ctx->pool, a);
}

// The same on tiles: bf16 rows [n, ld] in and out, the queries pre-scaled by TileQueryScale.
Status AttendTiles(const VitBlockSpec& spec, const VitBlockRows& rows, const uint16_t* q16,
                   const uint16_t* k16, const uint16_t* v16, int64_t ld, uint16_t* out16,
                   VisionContext* ctx) {
  ops::AttentionArgs a;
  a.q_bf16 = q16;
  a.k = k16;
  a.v = v16;
  a.kv_type = DType::kBF16;
  a.out_bf16 = out16;
  a.n_q = a.n_kv = rows.n;
  a.n_heads = a.n_kv_heads = spec.n_heads;
  a.head_dim = spec.head_dim;
  a.q_row_stride = a.out_row_stride = a.kv_row_stride = ld;
  a.scale = 1.0f;  // applied to q16 already
  a.spans = rows.spans;
  a.kv_scratch = &ctx->attention_scratch;
  a.bf16_tiles = true;
  return ops::Attention(*ctx->kernels, ctx->pool, a);
}

// The block on f32 activations: biases (and in the fast precision the FFN activation) are
// applied by the matmul's epilogue while the outputs are in cache, not in passes of their own.
Status RunBlockF32(const VitBlockSpec& spec, const VitBlockWeights& L, const VitBlockRows& rows,
                   VisionContext* ctx) {
  const int64_t n = rows.n, d = spec.d_model, ff = spec.d_ff;
  const bool gated = L.w_gate.data != nullptr;
  GrowScratch(ctx->xn, n * d);
  GrowScratch(ctx->q, n * d);
  GrowScratch(ctx->k, n * d);
  GrowScratch(ctx->v, n * d);
  GrowScratch(ctx->attn, n * d);
  GrowScratch(ctx->ff, (gated ? 2 : 1) * n * ff);
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  auto matmul = [&](const ops::WeightView& w, const float* in, float* o,
                    const ops::MatmulEpilogue& ep) {
    return ops::MatMul(kt, pool, w, in, n, w.k, o, w.n, &ctx->matmul_scratch, &ep);
  };
  float* x = rows.x;           // [n, d] residual stream
  float* xn = ctx->xn.data();  // [n, d] block input after the norm, then each branch's output
  VLMD_RETURN_IF_ERROR(Norm(spec, kt, pool, x, L.ln1_w, L.ln1_b, xn, n));
  const ops::WeightView* qkv_w[] = {&L.wq, &L.wk, &L.wv};
  float* const qkv_out[] = {ctx->q.data(), ctx->k.data(), ctx->v.data()};  // [n, d] each
  const ops::MatmulEpilogue qkv_ep[] = {BiasEpilogue(L.bq), BiasEpilogue(L.bk), BiasEpilogue(L.bv)};
  const ops::MatmulEpilogue* const qkv_ep_ptr[] = {&qkv_ep[0], &qkv_ep[1], &qkv_ep[2]};
  VLMD_RETURN_IF_ERROR(ops::MatMulShared(kt, pool, qkv_w, xn, n, d, qkv_out,
                                         &ctx->matmul_scratch, qkv_ep_ptr));
  VLMD_RETURN_IF_ERROR(QkNorm(spec, kt, pool, L.q_norm, ctx->q.data(), n));
  VLMD_RETURN_IF_ERROR(QkNorm(spec, kt, pool, L.k_norm, ctx->k.data(), n));
  if (rows.rope != nullptr) {
    VLMD_RETURN_IF_ERROR(Rope(spec, kt, pool, ctx->q.data(), rows));
    VLMD_RETURN_IF_ERROR(Rope(spec, kt, pool, ctx->k.data(), rows));
  }
  VLMD_RETURN_IF_ERROR(AttendF32(spec, rows, ctx));
  VLMD_RETURN_IF_ERROR(matmul(L.wo, ctx->attn.data(), xn, BiasEpilogue(L.bo)));
  AddBranch(xn, L.ls1, n, d, x);
  VLMD_RETURN_IF_ERROR(Norm(spec, kt, pool, x, L.ln2_w, L.ln2_b, xn, n));
  float* up = ctx->ff.data();  // [n, d_ff]
  ops::MatmulEpilogue up_ep = BiasEpilogue(L.b_up);
  if (spec.fast && !gated) {
    up_ep.act = FastActivation(kt, spec.ffn_act);
    if (up_ep.act == nullptr) {
      return UnimplementedError("vision encode: no kernel for the FFN activation");
    }
  }
  VLMD_RETURN_IF_ERROR(matmul(L.w_up, xn, up, up_ep));
  if (gated) {  // down(silu(gate x) * up x)
    float* gate = ctx->ff.data() + n * ff;
    VLMD_RETURN_IF_ERROR(matmul(L.w_gate, xn, gate, BiasEpilogue(L.b_gate)));
    VLMD_RETURN_IF_ERROR(ops::SwiGlu(kt, pool, gate, up, up, n * ff));
  } else if (!spec.fast) {
    VLMD_RETURN_IF_ERROR(ops::ActivateLikeGgml(kt, pool, spec.ffn_act, up, n * ff));
  }
  VLMD_RETURN_IF_ERROR(matmul(L.w_down, up, xn, BiasEpilogue(L.b_down)));
  AddBranch(xn, L.ls2, n, d, x);
  return Status::Ok();
}

Status RunBlockTiles(const VitBlockSpec& spec, const VitBlockWeights& L, const VitBlockRows& rows,
                     VisionContext* ctx) {
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  const int64_t n = rows.n, d = spec.d_model, hd = spec.head_dim, ff = spec.d_ff;
  const int64_t ld = kernels::TileRowStride(d), ld_ff = kernels::TileRowStride(ff);
  // Whole tiles of rows, plus 32 for the attention's in-place query reads, which start at any
  // row and read whole blocks of 32.
  const int64_t padded_rows = RoundUpTo(n, kernels::kTileRows) + 32;
  uint16_t* xn16 = Bf16Rows(&ctx->xn16, padded_rows, n, ld);  // norm output
  uint16_t* q16 = Bf16Rows(&ctx->q16, padded_rows, n, ld);
  uint16_t* k16 = Bf16Rows(&ctx->k16, padded_rows, n, ld);
  uint16_t* v16 = Bf16Rows(&ctx->v16, padded_rows, n, ld);
  uint16_t* attn16 = Bf16Rows(&ctx->attn16, padded_rows, n, ld);
  uint16_t* ff16 = Bf16Rows(&ctx->ff16, padded_rows, n, ld_ff);  // FFN hidden after activation
  // The products' inputs of widths that are not whole tile steps (e.g. SigLIP-so400m's
  // d_ff = 4304): nothing writes their padding columns, so zero them.
  ZeroPadColumns(xn16, n, ld, d);
  ZeroPadColumns(q16, n, ld, d);
  ZeroPadColumns(k16, n, ld, d);
  ZeroPadColumns(attn16, n, ld, d);
  ZeroPadColumns(ff16, n, ld_ff, ff);
  float* x = rows.x;
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
  // The norm into bf16 rows: LayerNorm in one pass; RMSNorm in f32, then rounded.
  auto norm_to_bf16 = [&](const F32Weights& w, const F32Weights& b) -> Status {
    if (spec.norm == VitNorm::kLayerNorm) {
      return ops::LayerNormToBf16(kt, pool, x, w.data(), OrNull(b), xn16, ld, n, d, spec.eps);
    }
    GrowScratch(ctx->xn, n * d);
    VLMD_RETURN_IF_ERROR(Norm(spec, kt, pool, x, w, b, ctx->xn.data(), n));
    ops::internal::ForRanges(pool, n, d, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) kt.to_bf16(ctx->xn.data() + r * d, xn16 + r * ld, d);
    });
    return Status::Ok();
  };
  const float q_scale = TileQueryScale(hd);
  VLMD_RETURN_IF_ERROR(norm_to_bf16(L.ln1_w, L.ln1_b));
  if (rows.rope == nullptr && L.q_norm.empty() && L.k_norm.empty()) {
    // (x Wq^T + bq) log2(e) / sqrt(head_dim) straight to bf16: bq_scaled = bq * q_scale.
    kernels::TileBf16Args q_args = to_bf16(xn16, ld, q16, ld, OrNull(L.bq_scaled));
    q_args.scale = q_scale;
    VLMD_RETURN_IF_ERROR(product(L.wq, q_args));
    VLMD_RETURN_IF_ERROR(product(L.wk, to_bf16(xn16, ld, k16, ld, OrNull(L.bk))));
  } else {
    GrowScratch(ctx->q, n * d);
    GrowScratch(ctx->k, n * d);
    VLMD_RETURN_IF_ERROR(product(L.wq, to_f32(xn16, ld, ctx->q.data(), d, OrNull(L.bq))));
    VLMD_RETURN_IF_ERROR(product(L.wk, to_f32(xn16, ld, ctx->k.data(), d, OrNull(L.bk))));
    VLMD_RETURN_IF_ERROR(QkNorm(spec, kt, pool, L.q_norm, ctx->q.data(), n));
    VLMD_RETURN_IF_ERROR(QkNorm(spec, kt, pool, L.k_norm, ctx->k.data(), n));
    if (rows.rope != nullptr) {
      VLMD_RETURN_IF_ERROR(Rope(spec, kt, pool, ctx->q.data(), rows));
      VLMD_RETURN_IF_ERROR(Rope(spec, kt, pool, ctx->k.data(), rows));
    }
    ops::internal::ForRanges(pool, n, 2 * d, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* qr = ctx->q.data() + r * d;
        for (int64_t i = 0; i < d; ++i) qr[i] *= q_scale;
        kt.to_bf16(qr, q16 + r * ld, d);
        kt.to_bf16(ctx->k.data() + r * d, k16 + r * ld, d);
      }
    });
  }
  VLMD_RETURN_IF_ERROR(product(L.wv, to_bf16(xn16, ld, v16, ld, OrNull(L.bv))));
  VLMD_RETURN_IF_ERROR(AttendTiles(spec, rows, q16, k16, v16, ld, attn16, ctx));
  VLMD_RETURN_IF_ERROR(product(L.wo, add_to_x(attn16, ld, OrNull(L.bo))));
  VLMD_RETURN_IF_ERROR(norm_to_bf16(L.ln2_w, L.ln2_b));
  if (L.w_gate.data != nullptr) {  // down(silu(gate x) * up x), the product in f32
    GrowScratch(ctx->ff, 2 * n * ff);
    float* up = ctx->ff.data();
    float* gate = ctx->ff.data() + n * ff;
    VLMD_RETURN_IF_ERROR(product(L.w_up, to_f32(xn16, ld, up, ff, OrNull(L.b_up))));
    VLMD_RETURN_IF_ERROR(product(L.w_gate, to_f32(xn16, ld, gate, ff, OrNull(L.b_gate))));
    VLMD_RETURN_IF_ERROR(ops::SwiGlu(kt, pool, gate, up, up, n * ff));
    ops::internal::ForRanges(pool, n, ff, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) kt.to_bf16(up + r * ff, ff16 + r * ld_ff, ff);
    });
  } else {
    kernels::TileBf16Args up_args = to_bf16(xn16, ld, ff16, ld_ff, OrNull(L.b_up));
    up_args.act = FastActivation(kt, spec.ffn_act);
    VLMD_RETURN_IF_ERROR(product(L.w_up, up_args));
  }
  return product(L.w_down, add_to_x(ff16, ld_ff, OrNull(L.b_down)));
}

}  // namespace

float TileQueryScale(int64_t head_dim) {
  return 1.44269504f / std::sqrt(static_cast<float>(head_dim));
}

Result<VitBlockWeights> LoadVitBlock(const gguf::GgufFile& f, int32_t l, const VitBlockSpec& spec,
                                     const VitBlockTensors& tensors,
                                     const ops::WeightPacking& packing, ops::PackedStore* store,
                                     uint64_t* released_bytes) {
  VitBlockWeights L;
  const int64_t d = spec.d_model, ff = spec.d_ff;
  const std::string p = "v.blk." + std::to_string(l) + ".";
  auto bias = [&](const char* name, int64_t len) {
    return tensors.biases_required ? GetF32(f, p + name, {len}) : GetOptionalF32(f, p + name, {len});
  };
  VLMD_ASSIGN_OR_RETURN(L.ln1_w, GetF32(f, p + "ln1.weight", {d}));
  VLMD_ASSIGN_OR_RETURN(L.ln2_w, GetF32(f, p + "ln2.weight", {d}));
  if (spec.norm == VitNorm::kLayerNorm) {
    VLMD_ASSIGN_OR_RETURN(L.ln1_b, bias("ln1.bias", d));
    VLMD_ASSIGN_OR_RETURN(L.ln2_b, bias("ln2.bias", d));
  } else {  // an RMSNorm's bias is optional (llama.cpp adds it when the file has one)
    VLMD_ASSIGN_OR_RETURN(L.ln1_b, GetOptionalF32(f, p + "ln1.bias", {d}));
    VLMD_ASSIGN_OR_RETURN(L.ln2_b, GetOptionalF32(f, p + "ln2.bias", {d}));
  }
  if (tensors.fused_qkv) {
    VLMD_ASSIGN_OR_RETURN(ops::WeightView qkv, GetMatrix(f, p + "attn_qkv.weight", d, 3 * d));
    VLMD_ASSIGN_OR_RETURN(F32Weights bqkv, bias("attn_qkv.bias", 3 * d));
    L.wq = RowSlice(qkv, 0, d);  // each third packed on its own below
    L.wk = RowSlice(qkv, d, d);
    L.wv = RowSlice(qkv, 2 * d, d);
    if (!bqkv.empty()) {
      L.bq.assign(bqkv.begin(), bqkv.begin() + d);
      L.bk.assign(bqkv.begin() + d, bqkv.begin() + 2 * d);
      L.bv.assign(bqkv.begin() + 2 * d, bqkv.end());
    }
  } else {
    VLMD_ASSIGN_OR_RETURN(L.wq, GetMatrix(f, p + "attn_q.weight", d, d));
    VLMD_ASSIGN_OR_RETURN(L.wk, GetMatrix(f, p + "attn_k.weight", d, d));
    VLMD_ASSIGN_OR_RETURN(L.wv, GetMatrix(f, p + "attn_v.weight", d, d));
    VLMD_ASSIGN_OR_RETURN(L.bq, bias("attn_q.bias", d));
    VLMD_ASSIGN_OR_RETURN(L.bk, bias("attn_k.bias", d));
    VLMD_ASSIGN_OR_RETURN(L.bv, bias("attn_v.bias", d));
  }
  VLMD_ASSIGN_OR_RETURN(L.wo, GetMatrix(f, p + "attn_out.weight", d, d));
  VLMD_ASSIGN_OR_RETURN(L.bo, bias("attn_out.bias", d));
  const std::string up = tensors.ffn_swapped ? "ffn_down" : "ffn_up";
  const std::string down = tensors.ffn_swapped ? "ffn_up" : "ffn_down";
  VLMD_ASSIGN_OR_RETURN(L.w_up, GetMatrix(f, p + up + ".weight", d, ff));
  VLMD_ASSIGN_OR_RETURN(L.b_up, bias((up + ".bias").c_str(), ff));
  VLMD_ASSIGN_OR_RETURN(L.w_down, GetMatrix(f, p + down + ".weight", ff, d));
  VLMD_ASSIGN_OR_RETURN(L.b_down, bias((down + ".bias").c_str(), d));
  if (tensors.gated_ffn) {
    VLMD_ASSIGN_OR_RETURN(L.w_gate, GetMatrix(f, p + "ffn_gate.weight", d, ff));
    VLMD_ASSIGN_OR_RETURN(L.b_gate, bias("ffn_gate.bias", ff));
  }
  if (tensors.qk_norm) {
    for (auto [name, w] : {std::pair{"attn_q_norm.weight", &L.q_norm}, std::pair{"attn_k_norm.weight", &L.k_norm}}) {
      const gguf::TensorInfo* t = f.FindTensor(p + name);
      if (t == nullptr) continue;
      const int64_t width = t->n_elements();
      if (t->n_dims != 1 || (width != d && width != spec.head_dim)) {
        return InvalidArgumentError("tensor " + p + name + ": " + std::to_string(width) +
                                    " values, neither the width " + std::to_string(d) +
                                    " nor the head size " + std::to_string(spec.head_dim));
      }
      VLMD_ASSIGN_OR_RETURN(*w, GetF32(f, p + name, {width}));
    }
  }
  if (tensors.layer_scale) {
    VLMD_ASSIGN_OR_RETURN(L.ls1, GetF32(f, p + "ls1.weight", {d}));
    VLMD_ASSIGN_OR_RETURN(L.ls2, GetF32(f, p + "ls2.weight", {d}));
    if (spec.fast) {
      // ls * (W x + b) = (ls W) x + ls b: the scaled f32 matrices replace the file's, so the
      // residual adds stay plain (and the tile epilogues can do them).
      VLMD_RETURN_IF_ERROR(FoldLayerScale(f, p + "attn_out.weight", d, L.ls1, &L.wo, &L.bo, &L.folded_wo));
      VLMD_RETURN_IF_ERROR(FoldLayerScale(f, p + "ffn_down.weight", ff, L.ls2, &L.w_down, &L.b_down,
                                          &L.folded_w_down));
      L.ls1.clear();
      L.ls2.clear();
    }
  }
  if (spec.fast) {
    const float q_scale = TileQueryScale(spec.head_dim);
    L.bq_scaled.reserve(L.bq.size());  // one allocation: chunk space is not reused piecemeal
    for (float b : L.bq) L.bq_scaled.push_back(b * q_scale);
  }
  for (ops::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_up, &L.w_gate, &L.w_down}) {
    if (w->data == nullptr) continue;
    VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, w, store));
    F32WeightsOwnMapping* folded = w == &L.wo ? &L.folded_wo : w == &L.w_down ? &L.folded_w_down : nullptr;
    if (folded != nullptr && !folded->empty()) {
      // A folded copy: not the file's pages. Dropped once a packed copy replaces it.
      if (w->packed != nullptr || w->tiles != nullptr) {
        w->data = nullptr;
        F32WeightsOwnMapping().swap(*folded);
      }
      continue;
    }
    *released_bytes += ReleasePackedRows(f, *w);  // runs from the packed copy from now on
  }
  return L;
}

bool VitBlocksOnTiles(const VitBlockSpec& spec, std::span<const VitBlockWeights> blocks,
                      const kernels::KernelTable& kt) {
  if (!spec.fast || kt.tile_bf16_matmul == nullptr || kt.to_bf16 == nullptr ||
      kt.tile_attention == nullptr || FastActivation(kt, spec.ffn_act) == nullptr) {
    return false;
  }
  for (const VitBlockWeights& L : blocks) {
    if (!L.ls1.empty() || !L.ls2.empty()) return false;  // the tile epilogues add unscaled
    for (const ops::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_up, &L.w_gate, &L.w_down}) {
      const bool present = w->data != nullptr || w->packed != nullptr;  // folded: packed only
      if (present && w->tiles == nullptr) return false;
    }
  }
  return true;
}

Status RunVitBlock(const VitBlockSpec& spec, const VitBlockWeights& w, const VitBlockRows& rows,
                   bool on_tiles, VisionContext* ctx) {
  if (ctx == nullptr || ctx->kernels == nullptr || rows.x == nullptr || rows.n < 1 ||
      rows.spans.empty()) {
    return InvalidArgumentError("vit block: no rows, no spans or no context");
  }
  return on_tiles ? RunBlockTiles(spec, w, rows, ctx) : RunBlockF32(spec, w, rows, ctx);
}

}  // namespace vlmd::engine::models
