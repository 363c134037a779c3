#include "engine/runtime/imatrix_collector.h"

#include <vector>

namespace vlmd::engine::runtime {
namespace {

// Sum of x^2 per column of rows x [rows, cols], in double per call, added to the float entry
// once (many rows of large activations would otherwise lose the small ones to float rounding).
std::vector<double> ColumnSquares(const float* x, int64_t rows, int64_t cols) {
  std::vector<double> sums(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) sums[static_cast<size_t>(c)] += double{row[c]} * row[c];
  }
  return sums;
}

}  // namespace

void ImatrixCollector::Observe(std::span<const std::string> weights, const float* x, int64_t rows,
                               int64_t cols) {
  if (weights.empty()) return;
  ++observations_;
  if (rows < min_rows_) {
    ++skipped_;
    return;
  }
  const std::vector<double> sums = ColumnSquares(x, rows, cols);
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

void ImatrixCollector::ObserveExperts(std::span<const std::string> weights, int32_t expert,
                                      int32_t n_expert, const float* x, int64_t rows,
                                      int64_t cols) {
  if (weights.empty() || expert < 0 || expert >= n_expert) return;
  const std::vector<double> sums = ColumnSquares(x, rows, cols);
  for (const std::string& name : weights) {
    gguf::ImatrixEntry& e = matrix_.entries[name];
    if (e.n_cols == 0) {
      e.n_cols = cols;
      e.sum_sq.assign(static_cast<size_t>(cols * n_expert), 0.0f);
      e.counts.assign(static_cast<size_t>(n_expert), 0.0f);
    }
    if (e.n_cols != cols || e.counts.size() != static_cast<size_t>(n_expert)) continue;  // another layout
    float* dst = e.sum_sq.data() + static_cast<int64_t>(expert) * cols;
    for (int64_t c = 0; c < cols; ++c) dst[c] += static_cast<float>(sums[static_cast<size_t>(c)]);
    e.counts[static_cast<size_t>(expert)] += static_cast<float>(rows);
  }
}

}  // namespace vlmd::engine::runtime
