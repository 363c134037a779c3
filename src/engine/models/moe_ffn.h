// A mixture-of-experts feed-forward layer as llama.cpp's build_moe_ffn runs Qwen3's MoE decoders
// (qwen3moe, qwen3vlmoe; src/llama-graph.cpp @3f545be): router logits from ffn_gate_inp, softmax
// over all experts, the n_used most probable chosen, their probabilities renormalized to sum 1
// (the sum clamped below at 2^-14), each chosen expert a SiLU-gated FFN, and the weighted
// outputs added in the order of the choice (most probable first). No shared expert.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/matmul_observer.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

struct MoeWeights {
  // [n_expert, d] (ffn_gate_inp), kept in its GGUF rows: the choice of experts is discrete, so
  // the logits are computed as the file gives them (never re-quantized by the fast precision).
  ops::WeightView router;
  // Per expert e: rows e * d_ff .. of ffn_{gate,up}_exps ([d_ff, d]) and of ffn_down_exps
  // ([d, d_ff]); gate_up[e] the packed fusion [gate | up] (packed == nullptr when not fused).
  std::vector<ops::WeightView> gate, up, down, gate_up;
  int32_t n_used = 0;
  int64_t d_ff = 0;  // expert_feed_forward_length
  // GGUF names for MatmulInputObserver::ObserveExperts: {gate_exps, up_exps}, {down_exps}.
  std::vector<std::string> names_gate_up, names_down;
};

// One thread's buffers for running an expert on m rows.
struct MoeExpertBuffers {
  std::vector<float> in;       // [m, d] gathered rows, then [m, d] the down projection's output
  std::vector<float> gate_up;  // [m, 2 d_ff] (or gate in hidden and up here when not fused)
  std::vector<float> hidden;   // [m, d_ff] the gated hidden rows
  ops::MatmulScratch mm;
};

// Buffers of one caller, grown to the largest batch seen.
struct MoeScratch {
  std::vector<float> logits;    // [n, n_expert], then the probabilities
  std::vector<int32_t> chosen;  // [n, n_used] expert ids, most probable first
  std::vector<float> weight;    // [n, n_used] their renormalized probabilities
  std::vector<int32_t> first;   // [n_expert + 1] start of each expert's entries in `entry`
  std::vector<int32_t> entry;   // [n * n_used] row * n_used + rank, grouped by expert
  std::vector<int32_t> active;  // experts with entries
  std::vector<int32_t> order;   // [n_expert] one row's expert ids, sorted by probability
  std::vector<int32_t> next;    // [n_expert] the counting sort's next slot per expert
  std::vector<float> y;         // [n * n_used, d] each entry's expert output
  std::vector<MoeExpertBuffers> workers;  // one per pool thread
};

// out[r] = sum over row r's chosen experts j (most probable first) of weight[r, j] * E_j(xn[r]),
// E(x) = down(silu(gate x) * up x), for r < n; xn and out [n, d] must not overlap.
// A row whose router logits are not finite gets a NaN output row. `observer` (may be null) sees
// each expert's input rows and gated hidden rows.
Status MoeFeedForward(const kernels::KernelTable& kt, ThreadPool* pool, const MoeWeights& w,
                      const float* xn, int64_t n, int64_t d, bool prompt_rows, MoeScratch* s,
                      ops::MatmulScratch* mm, float* out, MatmulInputObserver* observer = nullptr);

}  // namespace vlmd::engine::models
