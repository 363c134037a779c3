// The transformer block of every vision encoder (CLIP, SigLIP, the Qwen VL ViTs), one
// implementation with the families' variants as data:
//   x += Wo Attention(Rope(nq(Wq n1(x) + bq)), Rope(nk(Wk n1(x) + bk)), Wv n1(x) + bv) within row spans
//   x += Wdown act(Wup n2(x) + b_up) + b_down        (or SwiGLU: silu(Wgate ..) * (Wup ..))
// with n1, n2 LayerNorm or RMSNorm, act GELU (tanh / erf) or quick-GELU, RoPE the 2-D table of
// the Qwen ViTs or none (learned positions are added before the first block), nq and nk the
// optional q/k norms (InternViT-6B: the block's norm with a weight and no bias, over the whole
// projection or per head, as the weight's width says), and the spans the
// tiles of a tiled image, the windows of a windowed layer, or the whole image. Two executions of
// the same math: f32 activations (exact precision, or any CPU), and on the AMX tile unit in the
// fast precision (bf16 activation rows between the products, attention on tiles). With layer
// scale (InternViT: x += ls1 * attention, x += ls2 * FFN) the exact precision multiplies
// explicitly (f32 blocks); the fast one folds the scales into the projections at load. Attention is
// ops::Attention's, the decoder's, in spans.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/vision_context.h"
#include "engine/models/weights.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

enum class VitNorm : uint8_t { kLayerNorm, kRmsNorm };

// A family's block: the same for every block of one encoder.
struct VitBlockSpec {
  int64_t d_model = 0, d_ff = 0, n_heads = 0, head_dim = 0;  // d_model = n_heads * head_dim
  float eps = 1e-6f;
  VitNorm norm = VitNorm::kLayerNorm;
  ops::Activation ffn_act = ops::Activation::kGeluTanh;  // of the ungated FFN
  // Fast precision: the FFN activation computed by the up projection's epilogue, and the blocks
  // may run on tiles (VitBlocksOnTiles). Exact: ggml's 16-bit activation tables (parity).
  bool fast = false;
};

// The tensors of a family's block under "v.blk.N.".
struct VitBlockTensors {
  bool fused_qkv = false;        // attn_qkv [d, 3d] (Qwen3-VL) instead of attn_q / attn_k / attn_v
  bool gated_ffn = false;        // ffn_gate with SwiGLU (Qwen2.5-VL)
  bool biases_required = false;  // every projection has a bias (Qwen VL); else optional (CLIP)
  bool layer_scale = false;      // ls1 / ls2 scale each branch before its residual (InternViT)
  // attn_q_norm / attn_k_norm when present, each [d_model] (over the whole projection) or
  // [head_dim] (per head) (InternViT-6B).
  bool qk_norm = false;
  bool ffn_swapped = false;  // fc1 is named ffn_down, fc2 ffn_up (VisionConfig::ffn_swapped)
};

struct VitBlockWeights {
  F32Weights ln1_w, ln1_b, ln2_w, ln2_b;  // [d_model]; biases optional (empty)
  ops::WeightView wq, wk, wv, wo;                 // [d_model -> d_model]
  F32Weights bq, bk, bv, bo;                      // [d_model] or empty
  F32Weights bq_scaled;                           // bq * TileQueryScale(head_dim) (tile blocks)
  ops::WeightView w_up, w_gate, w_down;           // [d -> d_ff], gate: gated FFN only, [d_ff -> d]
  F32Weights b_up, b_gate, b_down;
  F32Weights ls1, ls2;                            // [d_model] layer scale, or empty
  F32Weights q_norm, k_norm;                      // [d_model] or [head_dim] weights, or empty
  // Fast precision with layer scale: ls1 / ls2 folded into the output and down projections
  // (their rows and biases scaled at load), these the scaled f32 matrices while no packed copy
  // replaces them; ls1 / ls2 are then empty and the blocks may run on tiles.
  F32WeightsOwnMapping folded_wo, folded_w_down;
};

// Block l of `file` as `tensors` says, shapes checked against `spec`; its matrices packed as
// `packing` asks (copies owned by `store`, the file pages they replace released and counted in
// *released_bytes). NOT_FOUND / INVALID_ARGUMENT naming the tensor.
Result<VitBlockWeights> LoadVitBlock(const gguf::GgufFile& file, int32_t l, const VitBlockSpec& spec,
                                     const VitBlockTensors& tensors,
                                     const ops::WeightPacking& packing, ops::PackedStore* store,
                                     uint64_t* released_bytes);

// The rows one block runs over.
struct VitBlockRows {
  float* x = nullptr;                // [n, d_model] residual stream, updated in place
  int64_t n = 0;
  std::span<const ops::RowSpan> spans;  // attention groups (cover [0, n), no overlap)
  const float* rope = nullptr;       // [n, head_dim] NeoX table (cos | sin halves) or nullptr
};

// Whether blocks run on the tile unit with `kt`: fast precision, every block matrix packed as
// bf16 tiles, and the table with the tile kernels. Decide once per encode, not per block.
bool VitBlocksOnTiles(const VitBlockSpec& spec, std::span<const VitBlockWeights> blocks,
                      const kernels::KernelTable& kt);

// Runs one block over `rows` (on tiles when on_tiles, see VitBlocksOnTiles; else f32). ctx:
// scratch. INVALID_ARGUMENT for bad rows; UNIMPLEMENTED for a missing kernel.
Status RunVitBlock(const VitBlockSpec& spec, const VitBlockWeights& w, const VitBlockRows& rows,
                   bool on_tiles, VisionContext* ctx);

// The tile attention's query scale: 1 / sqrt(head_dim), times log2(e) for the base-2 softmax of
// the fused kernel.
float TileQueryScale(int64_t head_dim);

}  // namespace vlmd::engine::models
