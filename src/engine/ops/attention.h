// Scaled dot-product attention over a KV cache (F16 or F32), with grouped-query heads and an
// optional causal mask by positions, or self-attention within row spans (vision encoders). A few
// query rows (decode) stream over the cache with an online softmax in O(head_dim) memory per
// thread; many rows (prefill) run as two f32 GEMMs per (kv head, 64-row query block), with one
// [64, n_kv] score block per thread, or in the fast precision (bf16_tiles, the x86 tables from
// avx2 up and the arm64 ones) as the fused bf16 kernel per (head, 128 queries).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::ops {

// A group of consecutive rows: [start, start + len).
struct RowSpan {
  int64_t start = 0;
  int64_t len = 0;
};

// All buffers are owned by the caller. Strides are in elements; 0 selects the contiguous layout
// written next to each buffer.
struct AttentionArgs {
  const float* q = nullptr;  // [n_q, n_heads, head_dim]; row r at q + r * q_row_stride
  // K and V caches, [n_kv, n_kv_heads, head_dim] in kv_type: element (j, g, d) at
  // base + (j * kv_row_stride + g * kv_head_stride + d) elements. A head-major cache
  // [n_kv_heads, n_ctx, head_dim] is kv_row_stride = head_dim, kv_head_stride = n_ctx * head_dim.
  const void* k = nullptr;
  const void* v = nullptr;
  // kF16 (the llama.cpp default cache type) or kF32; kBF16 on the tile path only (bf16_tiles,
  // not causal, with q_bf16 / out_bf16 below: the vision encoders' bf16 activation rows).
  DType kv_type = DType::kF16;
  float* out = nullptr;  // [n_q, n_heads, head_dim]; may be q when the strides match

  int64_t n_q = 0;         // query rows (1 for a decode step)
  int64_t n_kv = 0;        // cache rows to attend over
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // n_heads % n_kv_heads == 0; query head h reads kv head
                           // h / (n_heads / n_kv_heads) (GQA; MQA when n_kv_heads == 1)
  int64_t head_dim = 0;

  int64_t q_row_stride = 0;    // default n_heads * head_dim
  int64_t out_row_stride = 0;  // default n_heads * head_dim
  int64_t kv_row_stride = 0;   // default n_kv_heads * head_dim
  int64_t kv_head_stride = 0;  // default head_dim

  float scale = 0.0f;  // applied to q.k, usually 1 / sqrt(head_dim); must be finite

  // causal: query i attends kv j iff kv_pos[j] <= q_pos[i] (both arrays required). Otherwise
  // every query sees every kv row (vision encoders). kv_pos sorted ascending is the fast path
  // (masked rows are skipped, not computed); any order is correct.
  bool causal = false;
  const int32_t* q_pos = nullptr;   // [n_q]
  const int32_t* kv_pos = nullptr;  // [n_kv]
  // Sliding window (Gemma 3's local layers; causal only): query i also needs
  // q_win_pos[i] - kv_pos[j] < window, q_win_pos being the query's own position (q_pos may be
  // raised past it by a bidirectional span). 0: no window. On the tile path with bf16_tiles
  // (kv_pos sorted, or a ring's rotated run of positions), else on the streaming path.
  int32_t window = 0;
  const int32_t* q_win_pos = nullptr;  // [n_q] when window > 0

  // Self-attention in groups (vision encoders: the tiles of an image, the windows of a windowed
  // layer): when not empty, the query rows are the kv rows (n_q == n_kv, not causal) and row i
  // attends to exactly the rows of the span holding it. Spans must lie in [0, n_q) and not
  // overlap; rows outside every span are not written.
  std::span<const RowSpan> spans;

  // The tile path's bf16 operands (kv_type kBF16), instead of q and out: rows at q_row_stride /
  // out_row_stride. q_bf16 holds the queries already multiplied by scale * log2(e) (the tile
  // kernel's base-2 softmax; scale is then unused) and, when head_dim is a multiple of 32, must
  // be readable for whole 32-row blocks past the last query row (it is read in place).
  const uint16_t* q_bf16 = nullptr;
  uint16_t* out_bf16 = nullptr;

  // Optional caller-owned scratch, grown as needed and reused so that the layers of a prefill
  // or decode step do not allocate; nullptr allocates per call. The blocked (many-query) path
  // keeps its f32 copies of K and V^T there (2 * n_kv_heads * n_kv * head_dim floats) and per
  // thread a block of scores (64 * n_kv); the tile path its bf16 K and V^T tiles and per thread
  // a query block and its output; the streaming path its partial results per task.
  std::vector<float>* kv_scratch = nullptr;

  // The engine's fast precision: round Q, K and V to bf16 and run the fused bf16 attention
  // kernel (kernels::TileAttentionArgs: products and sums f32; AMX tiles, vdpbf16ps on
  // AVX512-BF16, FMAs on other AVX-512, on AVX2 and on NEON) where the kernel table has it
  // (Bf16AttentionRuns), for any number of query rows, so that a row's result does not depend
  // on how many share the call (TextDecoder sets it for prompt rows, never for decode steps).
  // Off: the f32 paths above.
  bool bf16_tiles = false;
  // With bf16_tiles, for self-attention without a mask on f32 operands (the vision encoders):
  // Q K^T on int8 where the table has it (kernels::tile_attention_i8, attention_i8.h: per-row
  // scales, the keys smoothed by their mean), P V still on bf16. Ignored otherwise.
  bool int8_scores = false;
};

// out = softmax(scale * q K^T + mask) V per query row and head, accumulated in f32. A query that
// sees no kv row (all masked, or n_kv == 0) gets a zero output. NaN/Inf in q, K or V propagate to
// the output (CheckFinite reports them). Parallel over (query, head) pairs; pool may be nullptr.
// Without kv_scratch it allocates O(tasks * head_dim) floats per call on the streaming path,
// 2 * n_kv_heads * n_kv * head_dim + threads * 64 * n_kv on the blocked path, and on the tile
// path about n_kv_heads * n_kv * head_dim (bf16 K and V^T tiles) + threads * (n_kv + 160) *
// head_dim. INVALID_ARGUMENT on inconsistent shapes,
// strides, null buffers, a missing position array or a kv_type other than F16/F32.
Status Attention(const kernels::KernelTable& kt, ThreadPool* pool, const AttentionArgs& args);

// True when an attention with bf16_tiles set and f32 (or bf16) operands of this head size runs on
// the table's bf16 kernel (else it takes the f32 paths).
bool Bf16AttentionRuns(const kernels::KernelTable& kt, int64_t head_dim);

}  // namespace vlmd::engine::ops
