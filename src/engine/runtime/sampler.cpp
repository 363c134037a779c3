// Sampling pipeline, in llama.cpp's order: penalties -> top-k -> top-p -> min-p -> temperature
// -> draw. All probabilities use max-subtracted exponentials in f64 for the normalization, except
// the per-token statistics (f32 SIMD: they run for every token of every request).
#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::runtime {

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature > 100.0f) {
    return InvalidArgumentError("temperature must be a finite number <= 100");
  }
  if (p.top_k < 0) return InvalidArgumentError("top_k must be >= 0");
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) return InvalidArgumentError("top_p must be in [0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return InvalidArgumentError("min_p must be in [0, 1]");
  if (!(p.repeat_penalty >= 0.001f && p.repeat_penalty <= 10.0f)) {
    return InvalidArgumentError("repeat_penalty must be in [0.001, 10]");
  }
  if (p.repeat_last_n < 0) return InvalidArgumentError("repeat_last_n must be >= 0");
  return Status::Ok();
}

namespace {

// The kernel table of the engine's ISA (VLMD_FORCE_ISA or the best available), for the
// vocabulary-sized exponentials of the token statistics.
const kernels::KernelTable& StatsKernels() {
  static const kernels::KernelTable& kt = []() -> const kernels::KernelTable& {
    const Result<kernels::Isa> isa = kernels::SelectIsa();
    return kernels::GetKernelTable(isa.ok() ? *isa : kernels::Isa::kRef);
  }();
  return kt;
}

// The largest logit (the logits are finite: the model checks them). Eight independent lanes so
// that the compiler vectorizes the loop (std::max_element's index chain does not).
float MaxLogit(std::span<const float> x) {
  constexpr size_t kLanes = 8;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, x[0]);
  size_t i = 0;
  for (; i + kLanes <= x.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  }
  float m = *std::max_element(lane, lane + kLanes);
  for (; i < x.size(); ++i) m = std::max(m, x[i]);
  return m;
}

// First index of the maximum: ties go to the lowest id, as the reference implementation. Logits
// with NaN (the engine stops on those before sampling) fall back to std::max_element's answer,
// so the result is always a valid index; an empty span gives 0.
int32_t ArgMax(std::span<const float> x) {
  if (x.empty()) return 0;
  const auto at = std::find(x.begin(), x.end(), MaxLogit(x));
  return static_cast<int32_t>((at != x.end() ? at : std::max_element(x.begin(), x.end())) -
                              x.begin());
}

}  // namespace

// SIMD exponentials (the table's exp_sub_sum, f32) and sums in f32 lanes: a few tens of
// microseconds for a 50k vocabulary where f64 std::exp took ~260 us per token, paid by every
// token of every request (the server asks for the stats).
TokenStats ComputeTokenStats(std::span<const float> logits, int32_t token) {
  TokenStats s;
  if (logits.empty()) return s;
  const float mx = MaxLogit(logits);
  thread_local std::vector<float> e;
  e.resize(logits.size());
  const int64_t n = static_cast<int64_t>(logits.size());
  const double z = StatsKernels().exp_sub_sum(logits.data(), mx, e.data(), n);  // sum e^(l - mx)
  constexpr size_t kLanes = 8;
  float lane[kLanes] = {};  // sum (l - mx) e^(l - mx), per lane
  size_t i = 0;
  for (; i + kLanes <= logits.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] += (logits[i + j] - mx) * e[i + j];
  }
  double wsum = 0.0;
  for (float v : lane) wsum += v;
  for (; i < logits.size(); ++i) wsum += double(logits[i] - mx) * e[i];
  const double log_z = std::log(z);
  s.logprob = static_cast<float>(double(logits[token]) - mx - log_z);
  // H = log Z - E[l - mx]  (nats), converted to bits.
  s.entropy_bits = static_cast<float>((log_z - wsum / z) / std::log(2.0));
  return s;
}

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int32_t n, double log_norm) {
  std::vector<TokenLogprob> top;
  if (n <= 0 || logits.empty()) return top;
  const size_t k = std::min(size_t(n), logits.size());
  // "a before b" in the result order: higher logit first, then lower id.
  auto better = [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
  };
  top.reserve(k);
  for (size_t i = 0; i < logits.size(); ++i) {
    const TokenLogprob c{static_cast<int32_t>(i), logits[i]};
    if (top.size() < k) {
      top.push_back(c);
      std::push_heap(top.begin(), top.end(), better);  // front: the worst kept
    } else if (better(c, top.front())) {
      std::pop_heap(top.begin(), top.end(), better);
      top.back() = c;
      std::push_heap(top.begin(), top.end(), better);
    }
  }
  std::sort_heap(top.begin(), top.end(), better);
  for (TokenLogprob& t : top) t.logprob = static_cast<float>(double(t.logprob) - log_norm);
  return top;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history,
                        TokenStats* stats) {
  const int32_t n = static_cast<int32_t>(logits.size());
  const bool penalize = params_.repeat_penalty != 1.0f && params_.repeat_last_n > 0;
  if (params_.temperature <= 0.0f && !penalize) {
    // Plain greedy: no copy of the logits. First maximum: ties go to the lowest id.
    const int32_t chosen = ArgMax(logits);
    if (stats != nullptr) *stats = ComputeTokenStats(logits, chosen);
    return chosen;
  }
  work_.assign(logits.begin(), logits.end());
  if (penalize) {
    const size_t from = history.size() > static_cast<size_t>(params_.repeat_last_n)
                            ? history.size() - params_.repeat_last_n
                            : 0;
    std::unordered_set<int32_t> seen(history.begin() + from, history.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= n) continue;
      work_[t] = work_[t] > 0 ? work_[t] / params_.repeat_penalty : work_[t] * params_.repeat_penalty;
    }
  }
  int32_t chosen = 0;
  if (params_.temperature <= 0.0f) {
    // First maximum: ties go to the lowest id, as the reference implementation.
    chosen = ArgMax(work_);
  } else {
    ids_.resize(n);
    std::iota(ids_.begin(), ids_.end(), 0);
    auto by_logit = [this](int32_t a, int32_t b) {
      return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
    };
    int32_t keep = n;
    if (params_.top_k > 0 && params_.top_k < n) keep = params_.top_k;
    const bool need_sorted = params_.top_p < 1.0f || keep < n;
    if (need_sorted) {
      std::partial_sort(ids_.begin(), ids_.begin() + keep, ids_.end(), by_logit);
    }
    ids_.resize(keep);
    // Probabilities of the candidates at temperature 1 for top-p / min-p (llama.cpp applies
    // them before temperature).
    const float mx = work_[*std::max_element(ids_.begin(), ids_.end(),
                                             [this](int32_t a, int32_t b) { return work_[a] < work_[b]; })];
    std::vector<double> p(ids_.size());
    double z = 0.0;
    for (size_t i = 0; i < ids_.size(); ++i) z += p[i] = std::exp(double(work_[ids_[i]]) - mx);
    size_t cut = ids_.size();
    if (params_.top_p < 1.0f) {  // ids_ sorted here
      double cum = 0.0;
      for (size_t i = 0; i < ids_.size(); ++i) {
        cum += p[i] / z;
        if (cum >= params_.top_p) {
          cut = i + 1;
          break;
        }
      }
    }
    std::vector<int32_t> cand;
    cand.reserve(cut);
    for (size_t i = 0; i < cut; ++i) {
      if (params_.min_p > 0.0f && p[i] < params_.min_p) continue;  // p[i] relative to p_max = 1
      cand.push_back(ids_[i]);
    }
    if (cand.empty()) cand.push_back(ids_[0]);
    std::vector<double> w(cand.size());
    double wz = 0.0;
    for (size_t i = 0; i < cand.size(); ++i) {
      wz += w[i] = std::exp((double(work_[cand[i]]) - mx) / params_.temperature);
    }
    std::uniform_real_distribution<double> u(0.0, wz);
    double r = u(rng_);
    chosen = cand.back();
    for (size_t i = 0; i < cand.size(); ++i) {
      r -= w[i];
      if (r <= 0.0) {
        chosen = cand[i];
        break;
      }
    }
  }
  if (stats != nullptr) *stats = ComputeTokenStats(logits, chosen);
  return chosen;
}

}  // namespace vlmd::engine::runtime
