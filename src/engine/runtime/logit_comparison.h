// How far a quantized model's next-token distributions are from a reference model's, over the
// same prompt rows (vlmd-quantize eval; what llama-perplexity --kl-divergence reports):
// mean KL(P_ref || P_test) of the softmaxed logits, the share of rows whose argmax agrees, and
// the logits' normalized squared error sum (test - ref)^2 / sum ref^2.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"

namespace vlmd::engine::runtime {

class LogitComparison {
 public:
  // One row: both models' logits for the same position. INVALID_ARGUMENT when the sizes differ
  // or are zero, or a logit is not finite.
  Status Add(std::span<const float> ref, std::span<const float> test);

  int64_t rows() const { return rows_; }
  double mean_kl() const { return rows_ ? kl_sum_ / static_cast<double>(rows_) : 0.0; }
  double max_kl() const { return max_kl_; }
  double top1_agreement() const {
    return rows_ ? static_cast<double>(top1_same_) / static_cast<double>(rows_) : 0.0;
  }
  double nmse() const { return ref_sq_ > 0.0 ? err_sq_ / ref_sq_ : 0.0; }

 private:
  int64_t rows_ = 0;
  int64_t top1_same_ = 0;
  double kl_sum_ = 0.0;
  double max_kl_ = 0.0;
  double err_sq_ = 0.0;
  double ref_sq_ = 0.0;
};

}  // namespace vlmd::engine::runtime
