// Collects an importance matrix from the decoder's matrix inputs (vlmd-quantize calibrate), as
// llama-imatrix does: per weight matrix, the sum of x^2 of every input column over the rows
// observed, and the number of rows. Forward calls of fewer than `min_rows` rows are skipped
// (llama-imatrix skips batches under 16 tokens: decode steps would weigh single tokens as much
// as whole prompts); calibration runs prompts only, so this drops nothing but tiny prompts.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/gguf/imatrix.h"
#include "engine/models/text_decoder.h"

namespace vlmd::engine::runtime {

class ImatrixCollector final : public models::MatmulInputObserver {
 public:
  explicit ImatrixCollector(int64_t min_rows = 16) : min_rows_(min_rows) {}

  void Observe(std::span<const std::string> weights, const float* x, int64_t rows,
               int64_t cols) override;
  // Per expert, as llama-imatrix records a MUL_MAT_ID: entries of n_expert matrices, each
  // expert's sums and count of its own rows, whatever the call's size (llama-imatrix applies
  // its small-batch skip to plain products only); not counted in observations().
  void ObserveExperts(std::span<const std::string> weights, int32_t expert, int32_t n_expert,
                      const float* x, int64_t rows, int64_t cols) override;

  // Observe calls (one per shared input per layer and forward call), and those skipped for
  // having fewer than min_rows rows.
  int64_t observations() const { return observations_; }
  int64_t skipped() const { return skipped_; }
  const gguf::ImportanceMatrix& matrix() const { return matrix_; }
  gguf::ImportanceMatrix& matrix() { return matrix_; }

 private:
  int64_t min_rows_;
  int64_t observations_ = 0;
  int64_t skipped_ = 0;
  gguf::ImportanceMatrix matrix_;
};

}  // namespace vlmd::engine::runtime
