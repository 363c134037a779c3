#include "engine/runtime/logit_comparison.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace vlmd::engine::runtime {
namespace {

// log-softmax in double: logits - max - log(sum exp(logits - max)).
void LogSoftmax(std::span<const float> logits, std::vector<double>& out) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double{l} - max);
  const double log_sum = std::log(sum);
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double{logits[i]} - max - log_sum;
}

}  // namespace

Status LogitComparison::Add(std::span<const float> ref, std::span<const float> test) {
  if (ref.empty() || ref.size() != test.size()) {
    return InvalidArgumentError("logit rows of " + std::to_string(ref.size()) + " and " +
                                std::to_string(test.size()) + " values cannot be compared");
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i]) || !std::isfinite(test[i])) {
      return InvalidArgumentError("logit " + std::to_string(i) + " is not finite");
    }
  }
  std::vector<double> lp_ref, lp_test;
  LogSoftmax(ref, lp_ref);
  LogSoftmax(test, lp_test);
  double kl = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) kl += std::exp(lp_ref[i]) * (lp_ref[i] - lp_test[i]);
  kl = std::max(kl, 0.0);  // rounding can leave -1e-17 for equal rows
  kl_sum_ += kl;
  max_kl_ = std::max(max_kl_, kl);
  const auto argmax = [](std::span<const float> v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
  if (argmax(ref) == argmax(test)) ++top1_same_;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = double{test[i]} - ref[i];
    err_sq_ += e * e;
    ref_sq_ += double{ref[i]} * ref[i];
  }
  ++rows_;
  return Status::Ok();
}

}  // namespace vlmd::engine::runtime
