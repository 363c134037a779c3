// Activation-aware scaling before quantization (AWQ, Lin et al. 2023), as an exact rewrite of a
// llama-family text model: for each matrix group that shares an input produced by a per-channel
// op, the input columns j of the group's matrices are multiplied by s_j and the producer's
// output channel j is divided by s_j, so the model computes the same function with no extra op
// at run time, while the columns that meet large activations get a larger share of each
// quantization block's range.
//   attn_norm (RMSNorm weight)  -> attn_q, attn_k, attn_v
//   ffn_norm  (RMSNorm weight)  -> ffn_gate, ffn_up
//   ffn_up    (its rows: SwiGLU / GeGLU multiply by up linearly) -> ffn_down
// attn_output is not scaled (its input comes from softmax(QK) V; folding into attn_v is exact
// only without grouped-query sharing, which most models have).
// The scales are s_j = a_j^alpha (a_j = sqrt(mean x_j^2) from the importance matrix, normalized
// so that max * min = 1), alpha chosen per group on a grid in [0, 1] to minimize the
// activation-weighted quantization error sum_j a_j^2 (W_ij - Q(W s)_ij / s_j)^2 over the group,
// the diagonal form of AWQ's output-error objective.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/imatrix.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::gguf {

struct AwqGroup {
  std::string producer;               // "blk.N.attn_norm.weight", ... or "blk.N.ffn_up.weight"
  bool producer_rows = false;         // the producer's rows are divided (ffn_up), else elements
  std::vector<std::string> matrices;  // their input columns are multiplied
  std::vector<float> scales = {};     // [n_cols]
  float alpha = 0.0f;                 // 0: scales all 1, nothing changes
  double error_plain = 0.0;   // weighted quantization error of the sampled rows at alpha 0
  double error_scaled = 0.0;  // ... at the chosen alpha (<= error_plain when searched)
};

// How a matrix will be quantized: its type, and the importance row its quantizer weighs by
// (empty: round to nearest; llama-quantize --imatrix's weights otherwise).
struct AwqTarget {
  DType type = DType::kF32;
  std::vector<float> importance;
};

// The groups of `file` (a llama-family decoder vlmd runs: llama, qwen2, qwen2vl, qwen3vl,
// gemma3) whose matrices all have `stats` entries, with their scales searched for quantizing each
// matrix as `targets` says (a scaled matrix's quantizer weighs by importance / s^2). A group with
// a missing tensor is skipped. `fixed_alpha` in [0, 1] takes that alpha for every group instead
// of searching (< 0: search). INVALID_ARGUMENT for another architecture, a producer whose shape
// does not fit its group or that has a bias (the fold would not be exact), a stats entry that
// does not fit its matrix, a matrix already quantized (it would be quantized twice) or
// fixed_alpha > 1.
Result<std::vector<AwqGroup>> SearchAwqScales(const GgufFile& file, const ImportanceMatrix& stats,
                                              const std::map<std::string, AwqTarget>& targets,
                                              ThreadPool* pool, float fixed_alpha = -1.0f);

}  // namespace vlmd::engine::gguf
