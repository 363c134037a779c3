// The CLIP / SigLIP vision transformer of an mmproj GGUF: patch embedding (a stride = patch
// convolution computed as a matmul over unfolded patches), optional class token, learned position
// embeddings, optional pre-LN, n x [LN1, MHA with biases, residual, LN2, FFN, residual], optional
// post-LN. Several tiles are encoded in one call (their rows share every matmul).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/vision_config.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

// A 64-byte aligned bf16 buffer: tile operands whose 64-byte rows each sit on one cache line.
class Bf16Buffer {
 public:
  void resize(size_t n) { data_ = reinterpret_cast<uint16_t*>(mem_.Reserve(n * sizeof(uint16_t))); }
  uint16_t* data() { return data_; }
  size_t bytes() const { return mem_.capacity(); }

 private:
  ops::MatmulScratch mem_;
  uint16_t* data_ = nullptr;
};

// Scratch buffers and execution resources of one caller. Buffers grow to the largest call seen
// and are reused; nothing in here carries state from one call to the next.
struct VisionContext {
  const kernels::KernelTable* kernels = nullptr;
  ThreadPool* pool = nullptr;  // may be nullptr (single thread)
  ops::MatmulScratch matmul_scratch;
  std::vector<float> patches, x, xn, q, k, v, attn, ff, proj_in, proj_mid;
  // The blocks on tiles (fast precision on AMX): bf16 activation rows between the products.
  Bf16Buffer xn16, q16, k16, v16, attn16, ff16;
  // Per pool worker, f32 attention: one head's K [n_pos, head_dim], V transposed
  // [head_dim, n_pos] and a block of attention scores [query rows, n_pos]; on tiles: the tile
  // operands (queries when copied, K, V^T) and the fused kernel's output block.
  struct AttentionWork {
    std::vector<float> k_head, v_head, v_head_t, scores;
    Bf16Buffer q_bf16, k_tiles, v_tiles;
    ops::MatmulScratch o_block;
  };
  std::vector<AttentionWork> attention_work;

  // Bytes held by all of the above (memory accounting of the activations).
  uint64_t bytes() const;
};

class ClipVit {
 public:
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }  // packed copies
  uint64_t released_bytes() const { return released_; }  // GGUF pages dropped after packing
  // Validates every tensor's presence and shape against `config`. `file` must outlive the ViT
  // (weights are views into its mapping). NOT_FOUND / INVALID_ARGUMENT naming the tensor.
  static Result<std::unique_ptr<ClipVit>> Load(const gguf::GgufFile& file,
                                               const VisionConfig& config,
                                               const ops::WeightPacking& packing = {});

  const VisionConfig& config() const { return config_; }
  bool has_class_token() const { return !class_embd_.empty(); }
  // Rows per tile in the output: patches, then the class token if any (llama.cpp's order).
  int64_t n_positions() const { return n_positions_; }
  // Blocks actually run (LLaVA uses the output of the second-to-last block).
  int32_t n_layers_used() const { return n_layers_used_; }

  // pixels: n_tiles tiles, each planar [3][image_size][image_size] normalized f32 (caller-owned).
  // out: [n_tiles * n_positions, d_model] f32 (caller-owned). INVALID_ARGUMENT for n_tiles < 1
  // or null buffers; INTERNAL when a NaN/Inf appears in the output.
  Status Encode(const float* pixels, int64_t n_tiles, VisionContext* ctx, float* out) const;
  // Whether Encode runs the blocks on bf16 tiles with `kt` (fast precision, every block weight
  // packed as tiles, the table with the tile kernels); else on f32 activations.
  bool UsesTileBlocks(const kernels::KernelTable& kt) const;

 private:
  struct Layer {
    std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
    ops::WeightView wq, wk, wv, wo, w_up, w_down;
    std::vector<float> bq, bk, bv, bo, b_up, b_down;
    std::vector<float> bq_scaled;  // bq * TileQueryScale(head_dim), for the tile blocks
  };

  ClipVit() = default;
  void Unfold(const float* pixels, int64_t n_tiles, float* patches) const;
  Status Attend(int64_t n_tiles, VisionContext* ctx) const;
  Status RunBlocks(int64_t n_tiles, VisionContext* ctx) const;  // f32 activations
  // The blocks in fast precision on AMX (clip_vit_tiles.cpp), ctx->x in place, with their
  // attention.
  Status RunTileBlocks(int64_t n_tiles, VisionContext* ctx) const;
  Status AttendTiles(int64_t n_tiles, VisionContext* ctx) const;
  // The tile blocks' query scale: 1 / sqrt(head_dim), times log2(e) for the base-2 softmax of
  // the fused attention kernel.
  static float TileQueryScale(int64_t head_dim);

  VisionConfig config_;
  int64_t n_positions_ = 0;
  int32_t n_layers_used_ = 0;
  bool fast_ = false;  // precision fast: plain activations, attention may run as bf16 tiles
  ops::PackedStore packed_;             // owns what the views' `packed` point at
  uint64_t released_ = 0;               // GGUF pages of packed matrices, dropped at load
  ops::WeightView patch_w_;             // [d_model, 3 * patch * patch]
  std::vector<float> patch_b_;          // [d_model] or empty
  std::vector<float> class_embd_;       // [d_model] or empty
  std::vector<float> pos_embd_;         // [n_positions, d_model]
  std::vector<float> pre_ln_w_, pre_ln_b_, post_ln_w_, post_ln_b_;  // empty when absent
  std::vector<Layer> layers_;
};

// ggml's CPU activations go through 16-bit lookup tables: y = f16(act(f16(x))) (GELU: only for
// |x| < 10; beyond, 0 or x). Applies that in place to x[0 .. n).
Status ActivateLikeGgml(const kernels::KernelTable& kt, ThreadPool* pool, ops::Activation act,
                        float* x, int64_t n);

}  // namespace vlmd::engine::models
