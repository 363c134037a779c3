// Qwen VL vision encoders (see qwen_vit.h). Numerics follow llama.cpp's CPU backend where parity
// needs it: the blocks as vit_block.cpp says, the merger's GELU through ggml's 16-bit tables
// (ops::ActivateLikeGgml).
#include "engine/models/qwen_vit.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "engine/models/weights.h"
#include "engine/ops/activation.h"
#include "engine/ops/norm.h"
#include "engine/ops/numerics.h"

namespace vlmd::engine::models {
namespace {

ops::MatmulEpilogue BiasEpilogue(const F32Weights& b) {
  return ops::MatmulEpilogue{b.empty() ? nullptr : b.data(), nullptr};
}

// A patch's place: (row, column) in patch units.
struct PatchPos {
  int32_t y = 0, x = 0;
};

// The patches of a px x py grid in 2x2 merge-unit order: units in raster order over the merged
// grid, inside a unit (0,0), (0,1), (1,0), (1,1) (FAMILIES.md 2.4 step 2).
std::vector<PatchPos> MergeOrder(int32_t px, int32_t py) {
  std::vector<PatchPos> order;
  order.reserve(static_cast<size_t>(px) * py);
  for (int32_t y = 0; y < py; y += 2) {
    for (int32_t x = 0; x < px; x += 2) {
      for (int32_t dy = 0; dy < 2; ++dy) {
        for (int32_t dx = 0; dx < 2; ++dx) order.push_back({y + dy, x + dx});
      }
    }
  }
  return order;
}

// Qwen2.5-VL windows: the merged grid gw x gh cut into windows of `win` x `win` units from the
// top-left (the last row / column of windows partial). Returns the units (raster indices) in
// window order: windows in raster order, units of a window in raster order; spans receives each
// window's rows (4 per unit) in that order.
std::vector<int32_t> WindowOrder(int32_t gw, int32_t gh, int32_t win, std::vector<ops::RowSpan>* spans) {
  std::vector<int32_t> units;
  units.reserve(static_cast<size_t>(gw) * gh);
  for (int32_t wy = 0; wy < gh; wy += win) {
    for (int32_t wx = 0; wx < gw; wx += win) {
      const int64_t start = 4 * static_cast<int64_t>(units.size());
      for (int32_t uy = wy; uy < std::min(gh, wy + win); ++uy) {
        for (int32_t ux = wx; ux < std::min(gw, wx + win); ++ux) units.push_back(uy * gw + ux);
      }
      spans->push_back({start, 4 * static_cast<int64_t>(units.size()) - start});
    }
  }
  return units;
}

}  // namespace

std::vector<float> ResizePositionGrid(std::span<const float> grid, int32_t side, int64_t d,
                                      int32_t width, int32_t height) {
  if (width == side && height == side) return {grid.begin(), grid.end()};
  std::vector<float> out(static_cast<size_t>(int64_t{width} * height * d));
  // ggml_compute_forward_upscale_f32, bilinear with align corners: no pixel offset, scale
  // (dst - 1) / (src - 1) (dst / src where a side is 1), corners clamped, all in float.
  const float sf0 = width > 1 && side > 1 ? static_cast<float>(width - 1) / (side - 1)
                                          : static_cast<float>(width) / side;
  const float sf1 = height > 1 && side > 1 ? static_cast<float>(height - 1) / (side - 1)
                                           : static_cast<float>(height) / side;
  auto corner = [side](float v, int64_t* lo, int64_t* hi, float* frac) {
    const int64_t f = static_cast<int64_t>(std::floor(v));
    *lo = std::clamp<int64_t>(f, 0, side - 1);
    *hi = std::clamp<int64_t>(f + 1, 0, side - 1);
    *frac = std::clamp(v - std::floor(v), 0.0f, 1.0f);
  };
  for (int32_t i1 = 0; i1 < height; ++i1) {
    int64_t y0, y1;
    float dy;
    corner(static_cast<float>(i1) / sf1, &y0, &y1, &dy);
    for (int32_t i0 = 0; i0 < width; ++i0) {
      int64_t x0, x1;
      float dx;
      corner(static_cast<float>(i0) / sf0, &x0, &x1, &dx);
      const float* a = grid.data() + (y0 * side + x0) * d;
      const float* b = grid.data() + (y0 * side + x1) * d;
      const float* c = grid.data() + (y1 * side + x0) * d;
      const float* e = grid.data() + (y1 * side + x1) * d;
      float* o = out.data() + (int64_t{i1} * width + i0) * d;
      for (int64_t k = 0; k < d; ++k) {
        o[k] = a[k] * (1 - dx) * (1 - dy) + b[k] * dx * (1 - dy) + c[k] * (1 - dx) * dy +
               e[k] * dx * dy;
      }
    }
  }
  return out;
}

Result<std::unique_ptr<QwenVit>> QwenVit::Load(const gguf::GgufFile& f, const VisionConfig& c,
                                               const ops::WeightPacking& packing) {
  if (!IsQwenVl(c.projector)) return InvalidArgumentError("QwenVit: not a Qwen VL projector");
  std::unique_ptr<QwenVit> m(new QwenVit());
  m->config_ = c;
  const bool v3 = c.projector == ProjectorType::kQwen3vl;
  const bool v25 = c.projector == ProjectorType::kQwen25vl;
  const int64_t d = c.d_model, d4 = 4 * d;
  m->block_ = VitBlockSpec{.d_model = d, .d_ff = c.d_ff, .n_heads = c.n_heads,
                           .head_dim = c.head_dim, .eps = c.eps,
                           .norm = v25 ? VitNorm::kRmsNorm : VitNorm::kLayerNorm,
                           .ffn_act = c.ffn_act, .fast = packing.precision == ops::Precision::kFast};
  const VitBlockTensors tensors{.fused_qkv = v3, .gated_ffn = v25, .biases_required = true,
                                .ffn_swapped = c.ffn_swapped};
  VLMD_ASSIGN_OR_RETURN(m->patch_w0_, GetPatchKernel(f, "v.patch_embd.weight", c.patch_size, d));
  VLMD_ASSIGN_OR_RETURN(m->patch_w1_, GetPatchKernel(f, "v.patch_embd.weight.1", c.patch_size, d));
  if (v3) {
    VLMD_ASSIGN_OR_RETURN(m->patch_b_, GetF32(f, "v.patch_embd.bias", {d}));
    const gguf::TensorInfo* pe = f.FindTensor("v.position_embd.weight");
    if (pe == nullptr) return NotFoundError("model tensor 'v.position_embd.weight' is missing");
    const int64_t n_pos = pe->n_dims == 2 ? pe->ne[1] : 0;
    const auto side = static_cast<int32_t>(std::lround(std::sqrt(static_cast<double>(n_pos))));
    if (n_pos < 1 || int64_t{side} * side != n_pos) {
      return InvalidArgumentError("v.position_embd.weight does not hold a square grid of positions");
    }
    m->pos_side_ = side;
    VLMD_ASSIGN_OR_RETURN(m->pos_embd_, GetF32(f, "v.position_embd.weight", {d, n_pos}));
  }
  VLMD_ASSIGN_OR_RETURN(m->post_ln_w_, GetF32(f, "v.post_ln.weight", {d}));
  if (!v25) {
    VLMD_ASSIGN_OR_RETURN(m->post_ln_b_, GetF32(f, "v.post_ln.bias", {d}));
  }
  VLMD_ASSIGN_OR_RETURN(m->mm0_, GetMatrix(f, "mm.0.weight", d4, d4));
  VLMD_ASSIGN_OR_RETURN(m->mm0_b_, GetF32(f, "mm.0.bias", {d4}));
  VLMD_ASSIGN_OR_RETURN(m->mm2_, GetMatrix(f, "mm.2.weight", d4, c.projection_dim));
  VLMD_ASSIGN_OR_RETURN(m->mm2_b_, GetF32(f, "mm.2.bias", {c.projection_dim}));
  // The patch kernels are packed too (in the fast precision: the tile unit, or int8 without one;
  // on the f32 path they took ~3% of a Qwen3-VL-2B encode at 448x448).
  std::vector<ops::WeightView*> to_pack = {&m->patch_w0_, &m->patch_w1_, &m->mm0_, &m->mm2_};
  for (int32_t l = 0; l < c.n_layers; ++l) {
    VLMD_ASSIGN_OR_RETURN(VitBlockWeights block,
                          LoadVitBlock(f, l, m->block_, tensors, packing, &m->packed_,
                                       &m->released_));
    m->blocks_.push_back(std::move(block));
    // Deepstack layers are known by their tensors (as llama.cpp detects them).
    const std::string ds = "v.deepstack." + std::to_string(l) + ".";
    if (v3 && f.FindTensor(ds + "fc1.weight") != nullptr) {
      DeepstackMerger& m_ds = m->deepstack_.emplace_back();
      m_ds.layer = l;
      VLMD_ASSIGN_OR_RETURN(m_ds.norm_w, GetF32(f, ds + "norm.weight", {d4}));
      VLMD_ASSIGN_OR_RETURN(m_ds.norm_b, GetF32(f, ds + "norm.bias", {d4}));
      VLMD_ASSIGN_OR_RETURN(m_ds.fc1, GetMatrix(f, ds + "fc1.weight", d4, d4));
      VLMD_ASSIGN_OR_RETURN(m_ds.fc1_b, GetF32(f, ds + "fc1.bias", {d4}));
      VLMD_ASSIGN_OR_RETURN(m_ds.fc2, GetMatrix(f, ds + "fc2.weight", d4, c.projection_dim));
      VLMD_ASSIGN_OR_RETURN(m_ds.fc2_b, GetF32(f, ds + "fc2.bias", {c.projection_dim}));
    }
  }
  for (DeepstackMerger& m_ds : m->deepstack_) to_pack.insert(to_pack.end(), {&m_ds.fc1, &m_ds.fc2});
  for (ops::WeightView* w : to_pack) {
    VLMD_RETURN_IF_ERROR(ops::PackWeight(packing, w, &m->packed_));
    m->released_ += ReleasePackedRows(f, *w);
  }
  return m;
}

Status QwenVit::Mlp(const ops::WeightView& w1, const F32Weights& b1,
                    const ops::WeightView& w2, const F32Weights& b2, const float* in,
                    int64_t rows, VisionContext* ctx, float* out, int64_t ldo) const {
  const kernels::KernelTable& kt = *ctx->kernels;
  GrowScratch(ctx->proj_mid, rows * w1.n);
  const ops::MatmulEpilogue ep1 = BiasEpilogue(b1), ep2 = BiasEpilogue(b2);
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, ctx->pool, w1, in, rows, w1.k, ctx->proj_mid.data(), w1.n,
                                   &ctx->matmul_scratch, &ep1));
  VLMD_RETURN_IF_ERROR(ops::ActivateLikeGgml(kt, ctx->pool, ops::Activation::kGeluTanh,
                                        ctx->proj_mid.data(), rows * w1.n));
  return ops::MatMul(kt, ctx->pool, w2, ctx->proj_mid.data(), rows, w2.k, out, ldo,
                     &ctx->matmul_scratch, &ep2);
}

Result<std::unique_ptr<QwenVit::State>> QwenVit::Begin(const float* pixels, int32_t width,
                                                       int32_t height, VisionContext* ctx) const {
  const VisionConfig& c = config_;
  const int32_t p = c.patch_size, align = 2 * p;
  if (pixels == nullptr || ctx == nullptr || ctx->kernels == nullptr || width < align ||
      height < align || width % align != 0 || height % align != 0) {
    return InvalidArgumentError("qwen vision encode: image of " + std::to_string(width) + "x" +
                                std::to_string(height) + " is not a multiple of " +
                                std::to_string(align) + " pixels per side, or null buffers");
  }
  const kernels::KernelTable& kt = *ctx->kernels;
  ThreadPool* pool = ctx->pool;
  auto st = std::make_unique<State>();
  st->width = width;
  st->height = height;
  st->n_layers = c.n_layers;
  const int32_t px = width / p, py = height / p, gw = px / 2, gh = py / 2;
  const int64_t n = int64_t{px} * py, n_tok = int64_t{gw} * gh;
  st->n = n;
  st->n_tok = n_tok;
  const int64_t d = c.d_model, hd = c.head_dim, kp = 3 * int64_t{p} * p;

  // Row order of the residual stream: merge units, in window order for 2.5-VL (each window's
  // rows contiguous, so that a windowed layer attends within spans), else raster order.
  st->units.resize(static_cast<size_t>(n_tok));
  for (int64_t u = 0; u < n_tok; ++u) st->units[static_cast<size_t>(u)] = static_cast<int32_t>(u);
  if (c.n_wa_pattern > 0) st->units = WindowOrder(gw, gh, c.window_units, &st->windows);
  const std::vector<PatchPos> merge = MergeOrder(px, py);
  std::vector<PatchPos> rows(static_cast<size_t>(n));  // the patch of each row
  for (int64_t i = 0; i < n_tok; ++i) {
    for (int64_t s = 0; s < 4; ++s) {
      rows[static_cast<size_t>(4 * i + s)] = merge[static_cast<size_t>(4 * st->units[i] + s)];
    }
  }

  // Patch embedding: the two convolutions summed (a still image is both temporal slices).
  GrowScratch(ctx->patches, n * kp);
  GrowScratch(ctx->xn, n * d);
  st->x.resize(static_cast<size_t>(n * d));
  float* x = st->x.data();     // [n, d] residual stream
  float* xn = ctx->xn.data();  // [n, d] scratch
  for (int64_t r = 0; r < n; ++r) {
    const PatchPos& pp = rows[static_cast<size_t>(r)];
    float* dst = ctx->patches.data() + r * kp;
    for (int64_t ch = 0; ch < 3; ++ch) {
      for (int64_t ky = 0; ky < p; ++ky) {
        const float* src = pixels + (ch * height + int64_t{pp.y} * p + ky) * width + int64_t{pp.x} * p;
        std::copy_n(src, p, dst + (ch * p + ky) * p);
      }
    }
  }
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, patch_w0_, ctx->patches.data(), n, kp, xn, d,
                                   &ctx->matmul_scratch));
  ops::MatmulEpilogue add_first;
  add_first.residual = xn;
  add_first.ld_residual = d;
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, patch_w1_, ctx->patches.data(), n, kp, x, d,
                                   &ctx->matmul_scratch, &add_first));
  if (!patch_b_.empty()) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t k = 0; k < d; ++k) x[r * d + k] += patch_b_[k];
    }
  }
  if (!pos_embd_.empty()) {  // learned positions resized to the patch grid, then in row order
    const std::vector<float> grid = ResizePositionGrid(pos_embd_, pos_side_, d, px, py);
    for (int64_t r = 0; r < n; ++r) {
      const PatchPos& pp = rows[static_cast<size_t>(r)];
      const float* e = grid.data() + (int64_t{pp.y} * px + pp.x) * d;
      for (int64_t k = 0; k < d; ++k) x[r * d + k] += e[k];
    }
  }

  // 2-D RoPE table [n, hd]: pair j < hd/4 rotates by the row, hd/4 <= j < hd/2 by the column,
  // each section with its own frequency index (j, then j - hd/4) over hd/2 values.
  st->rope.resize(static_cast<size_t>(n * hd));
  const int64_t half = hd / 2, quarter = hd / 4;
  std::vector<double> inv_freq(static_cast<size_t>(quarter));
  for (int64_t j = 0; j < quarter; ++j) {
    inv_freq[static_cast<size_t>(j)] = std::pow(10000.0, -2.0 * static_cast<double>(j) / half);
  }
  for (int64_t r = 0; r < n; ++r) {
    const PatchPos& pp = rows[static_cast<size_t>(r)];
    float* t = st->rope.data() + r * hd;
    for (int64_t j = 0; j < half; ++j) {
      const double pos = j < quarter ? pp.y : pp.x;
      const double theta = pos * inv_freq[static_cast<size_t>(j % quarter)];
      t[j] = static_cast<float>(std::cos(theta));
      t[half + j] = static_cast<float>(std::sin(theta));
    }
  }
  st->deepstack.resize(deepstack_.size());
  return st;
}

int32_t QwenVit::BlocksLeft(const State& st) { return st.n_layers - st.next_layer; }

std::span<const ops::RowSpan> QwenVit::AttentionSpans(int32_t l, const State& st,
                                                 std::span<const ops::RowSpan> whole) const {
  const bool windowed = config_.n_wa_pattern > 0 && (l + 1) % config_.n_wa_pattern != 0;
  return windowed ? std::span<const ops::RowSpan>(st.windows) : whole;
}

Status QwenVit::RunBlock(State* st, VisionContext* ctx) const {
  if (st == nullptr || ctx == nullptr || st->next_layer >= st->n_layers) {
    return InvalidArgumentError("qwen vision encode: no block left to run");
  }
  if (ctx->kernels != st->kernels) {  // the tile decision belongs to a kernel table
    st->kernels = ctx->kernels;
    st->on_tiles = UsesTileBlocks(*ctx->kernels);
  }
  const int32_t l = st->next_layer;
  const ops::RowSpan whole[] = {{0, st->n}};
  const VitBlockRows rows{.x = st->x.data(), .n = st->n, .spans = AttentionSpans(l, *st, whole),
                          .rope = st->rope.data()};
  VLMD_RETURN_IF_ERROR(RunVitBlock(block_, blocks_[static_cast<size_t>(l)], rows, st->on_tiles, ctx));
  VLMD_RETURN_IF_ERROR(Deepstack(l, st, ctx));
  ++st->next_layer;
  return Status::Ok();
}

bool QwenVit::UsesTileBlocks(const kernels::KernelTable& kt) const {
  return VitBlocksOnTiles(block_, blocks_, kt);
}

Status QwenVit::Deepstack(int32_t l, State* st, VisionContext* ctx) const {
  const auto it = std::find_if(deepstack_.begin(), deepstack_.end(),
                               [l](const DeepstackMerger& m) { return m.layer == l; });
  if (it == deepstack_.end()) return Status::Ok();
  // The block output, 4 rows per merged token: LayerNorm(4d) -> fc1 -> GELU -> fc2.
  const VisionConfig& c = config_;
  const size_t k = static_cast<size_t>(it - deepstack_.begin());
  GrowScratch(ctx->proj_in, st->n * c.d_model);
  VLMD_RETURN_IF_ERROR(ops::LayerNorm(*ctx->kernels, ctx->pool, st->x.data(), it->norm_w.data(),
                                      it->norm_b.data(), ctx->proj_in.data(), st->n_tok,
                                      4 * int64_t{c.d_model}, c.eps));
  st->deepstack[k].resize(static_cast<size_t>(st->n_tok * c.projection_dim));
  return Mlp(it->fc1, it->fc1_b, it->fc2, it->fc2_b, ctx->proj_in.data(), st->n_tok, ctx,
             st->deepstack[k].data(), c.projection_dim);
}

Status QwenVit::Finish(State* st, VisionContext* ctx, float* out) const {
  if (st == nullptr || ctx == nullptr || out == nullptr || st->next_layer != st->n_layers) {
    return InvalidArgumentError("qwen vision encode: blocks left to run, or null buffers");
  }
  const VisionConfig& c = config_;
  const kernels::KernelTable& kt = *ctx->kernels;
  const int64_t n = st->n, n_tok = st->n_tok, d = c.d_model, pd = c.projection_dim;
  const int64_t out_w = n_embd_out();
  // Merger: norm per patch, 4 rows -> one 4d row, mm.0 -> GELU -> mm.2.
  GrowScratch(ctx->xn, n * d);
  if (block_.norm == VitNorm::kRmsNorm) {
    VLMD_RETURN_IF_ERROR(ops::RmsNorm(kt, ctx->pool, st->x.data(), post_ln_w_.data(),
                                      ctx->xn.data(), n, d, c.eps));
  } else {
    VLMD_RETURN_IF_ERROR(ops::LayerNorm(kt, ctx->pool, st->x.data(), post_ln_w_.data(),
                                        post_ln_b_.data(), ctx->xn.data(), n, d, c.eps));
  }
  std::vector<float> merged(static_cast<size_t>(n_tok * pd));
  VLMD_RETURN_IF_ERROR(Mlp(mm0_, mm0_b_, mm2_, mm2_b_, ctx->xn.data(), n_tok, ctx, merged.data(), pd));
  // Back to raster order over the merged grid: [main | deepstack 0 | deepstack 1 ...] per token.
  for (int64_t i = 0; i < n_tok; ++i) {
    float* o = out + int64_t{st->units[static_cast<size_t>(i)]} * out_w;
    std::copy_n(merged.data() + i * pd, pd, o);
    for (size_t k = 0; k < st->deepstack.size(); ++k) {
      std::copy_n(st->deepstack[k].data() + i * pd, pd, o + static_cast<int64_t>(k + 1) * pd);
    }
  }
  return ops::CheckFinite(out, n_tok * out_w, "vision encoder output");
}

Status QwenVit::Encode(const float* pixels, int32_t width, int32_t height, VisionContext* ctx,
                       float* out) const {
  if (out == nullptr) return InvalidArgumentError("qwen vision encode: null output");
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<State> st, Begin(pixels, width, height, ctx));
  while (BlocksLeft(*st) > 0) {
    VLMD_RETURN_IF_ERROR(RunBlock(st.get(), ctx));
  }
  return Finish(st.get(), ctx, out);
}

}  // namespace vlmd::engine::models
