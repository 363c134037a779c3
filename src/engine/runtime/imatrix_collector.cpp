#include "engine/runtime/imatrix_collector.h"

#include <vector>

namespace vlmd::engine::runtime {

void ImatrixCollector::Observe(std::span<const std::string> weights, const float* x, int64_t rows,
                               int64_t cols) {
  if (weights.empty()) return;
  ++observations_;
  if (rows < min_rows_) {
    ++skipped_;
    return;
  }
  // Sums in double per call, added to the float entry once (many rows of large activations
  // would otherwise lose the small ones to float rounding).
  std::vector<double> sums(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) sums[static_cast<size_t>(c)] += double{row[c]} * row[c];
  }
  for (const std::string& name : weights) {
    gguf::ImatrixEntry& e = matrix_.entries[name];
    if (e.n_cols == 0) {
      e.n_cols = cols;
      e.sum_sq.assign(static_cast<size_t>(cols), 0.0f);
      e.counts.assign(1, 0.0f);
    }
    for (int64_t c = 0; c < cols; ++c) {
      e.sum_sq[static_cast<size_t>(c)] += static_cast<float>(sums[static_cast<size_t>(c)]);
    }
    e.counts[0] += static_cast<float>(rows);
  }
}

}  // namespace vlmd::engine::runtime
