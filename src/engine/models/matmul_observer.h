// Sees the input rows of the decoder layers' matrix products before they run (calibration:
// vlmd-quantize calibrate sums x^2 per input column, as llama-imatrix does).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace vlmd::engine::models {

// `weights` are the GGUF names of the matrices these rows multiply: q, k and v share one input,
// as do gate and up. The output head is not observed (llama-imatrix leaves it out by default).
class MatmulInputObserver {
 public:
  virtual ~MatmulInputObserver() = default;
  virtual void Observe(std::span<const std::string> weights, const float* x, int64_t rows,
                       int64_t cols) = 0;
  // A mixture of experts: the rows that expert `expert` (of n_expert) runs on, for its stacked
  // matrices `weights` (ffn_{gate,up}_exps, or ffn_down_exps with the gated hidden rows), as
  // llama-imatrix records a MUL_MAT_ID per expert. The default ignores them.
  virtual void ObserveExperts(std::span<const std::string> /*weights*/, int32_t /*expert*/,
                              int32_t /*n_expert*/, const float* /*x*/, int64_t /*rows*/,
                              int64_t /*cols*/) {}
};

}  // namespace vlmd::engine::models
