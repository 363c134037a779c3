// Mixture-of-experts feed-forward (see moe_ffn.h). Each expert runs once per call on the rows
// that chose it (gathered), so a prompt's experts read their weights once per chunk and a
// decode step reads only the chosen experts' weights.
#include "engine/models/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/ops/activation.h"
#include "engine/ops/parallel.h"

namespace vlmd::engine::models {
namespace {

template <typename T>
void Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// Softmax of one row in place in ggml's soft_max steps (exp of x - max, the sum in double, one
// multiply by its f32 inverse; ggml's vector exp and per-vector partial sums can round the last
// bit differently); false when a logit is not finite.
bool SoftmaxRow(float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
    mx = std::max(mx, x[i]);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return true;
}

// Expert e on its m entries (row * n_used + rank, rows of xn [.., d]): the gathered rows through
// gate and up (one fused product when packed), SiLU-gated, then down, each output row to
// y[entry].
Status RunExpert(const kernels::KernelTable& kt, ThreadPool* pool, const MoeWeights& w, int32_t e,
                 const int32_t* entries, int64_t m, const float* xn, int64_t d,
                 bool prompt_rows, MoeExpertBuffers* b, float* y, MatmulInputObserver* observer) {
  const int64_t n_used = w.n_used, ff = w.d_ff;
  Grow(b->in, m * d);
  Grow(b->gate_up, m * 2 * ff);
  Grow(b->hidden, m * ff);
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(xn + (entries[i] / n_used) * d, d, b->in.data() + i * d);
  }
  const auto n_expert = static_cast<int32_t>(w.router.n);
  if (observer) observer->ObserveExperts(w.names_gate_up, e, n_expert, b->in.data(), m, d);
  const auto ue = static_cast<size_t>(e);
  if (w.gate_up[ue].packed != nullptr && kt.packed_matmul != nullptr) {
    VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, ops::RouteForRows(w.gate_up[ue], prompt_rows),
                                     b->in.data(), m, d, b->gate_up.data(), 2 * ff, &b->mm));
    VLMD_RETURN_IF_ERROR(ops::SwiGluRows(kt, pool, b->gate_up.data(), m, ff, b->hidden.data()));
  } else {
    float* up = b->gate_up.data();
    VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, ops::RouteForRows(w.gate[ue], prompt_rows),
                                     b->in.data(), m, d, b->hidden.data(), ff, &b->mm));
    VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, ops::RouteForRows(w.up[ue], prompt_rows),
                                     b->in.data(), m, d, up, ff, &b->mm));
    VLMD_RETURN_IF_ERROR(ops::SwiGlu(kt, pool, b->hidden.data(), up, b->hidden.data(), m * ff));
  }
  if (observer) observer->ObserveExperts(w.names_down, e, n_expert, b->hidden.data(), m, ff);
  // The down projection into the gathered-rows buffer (free now), then to each entry's place.
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, ops::RouteForRows(w.down[ue], prompt_rows),
                                   b->hidden.data(), m, ff, b->in.data(), d, &b->mm));
  for (int64_t i = 0; i < m; ++i) std::copy_n(b->in.data() + i * d, d, y + static_cast<int64_t>(entries[i]) * d);
  return Status::Ok();
}

}  // namespace

Status MoeFeedForward(const kernels::KernelTable& kt, ThreadPool* pool, const MoeWeights& w,
                      const float* xn, int64_t n, int64_t d, bool prompt_rows, MoeScratch* s,
                      ops::MatmulScratch* mm, float* out, MatmulInputObserver* observer) {
  const int64_t n_expert = w.router.n, n_used = w.n_used;
  if (n < 1) return Status::Ok();
  // Router: logits, probabilities, the n_used most probable (ties to the lower id), renormalized.
  Grow(s->logits, n * n_expert);
  Grow(s->chosen, n * n_used);
  Grow(s->weight, n * n_used);
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, w.router, xn, n, d, s->logits.data(), n_expert, mm));
  std::vector<int32_t>& ids = s->order;
  ids.resize(static_cast<size_t>(n_expert));
  for (int64_t r = 0; r < n; ++r) {
    float* p = s->logits.data() + r * n_expert;
    std::iota(ids.begin(), ids.end(), 0);
    if (!SoftmaxRow(p, n_expert)) {
      // No choice to make: the first experts with NaN weights, so that the row's output (and
      // its logits) are NaN and the caller fails that row's sequence alone (a batched decode
      // step checks each logit row), as the dense FFN propagates a non-finite row.
      for (int64_t j = 0; j < n_used; ++j) {
        s->chosen[static_cast<size_t>(r * n_used + j)] = static_cast<int32_t>(j);
        s->weight[static_cast<size_t>(r * n_used + j)] = std::numeric_limits<float>::quiet_NaN();
      }
      continue;
    }
    std::partial_sort(ids.begin(), ids.begin() + n_used, ids.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0.0;  // ggml_sum_rows accumulates in double, then rounds to f32
    for (int64_t j = 0; j < n_used; ++j) sum += p[ids[static_cast<size_t>(j)]];
    const float total = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int64_t j = 0; j < n_used; ++j) {
      const int32_t e = ids[static_cast<size_t>(j)];
      s->chosen[static_cast<size_t>(r * n_used + j)] = e;
      s->weight[static_cast<size_t>(r * n_used + j)] = p[e] / total;
    }
  }
  // Entries (row, rank) grouped by expert: a counting sort, rows ascending within an expert.
  s->first.assign(static_cast<size_t>(n_expert + 1), 0);
  for (int64_t i = 0; i < n * n_used; ++i) {
    ++s->first[static_cast<size_t>(s->chosen[static_cast<size_t>(i)] + 1)];
  }
  for (int64_t e = 0; e < n_expert; ++e) s->first[static_cast<size_t>(e + 1)] += s->first[static_cast<size_t>(e)];
  Grow(s->entry, n * n_used);
  s->next.assign(s->first.begin(), s->first.end() - 1);
  for (int64_t i = 0; i < n * n_used; ++i) {
    const int32_t e = s->chosen[static_cast<size_t>(i)];
    s->entry[static_cast<size_t>(s->next[static_cast<size_t>(e)]++)] = static_cast<int32_t>(i);
  }
  // Each chosen expert on its rows; outputs to y[row * n_used + rank].
  Grow(s->y, n * n_used * d);
  s->active.clear();
  for (int32_t e = 0; e < n_expert; ++e) {
    if (s->first[static_cast<size_t>(e + 1)] > s->first[static_cast<size_t>(e)]) s->active.push_back(e);
  }
  const int workers = pool != nullptr ? pool->size() : 1;
  if (static_cast<int>(s->workers.size()) < workers) s->workers.resize(static_cast<size_t>(workers));
  const auto run = [&](int32_t e, ThreadPool* p, MoeExpertBuffers* buf) {
    const int32_t e0 = s->first[static_cast<size_t>(e)];
    return RunExpert(kt, p, w, e, s->entry.data() + e0, s->first[static_cast<size_t>(e + 1)] - e0, xn, d,
                     prompt_rows, buf, s->y.data(), observer);
  };
  if (!prompt_rows && workers > 1 && observer == nullptr) {  // an observer is not thread-safe
    // Decode rows (a few per expert): the experts side by side, each whole on one thread, so a
    // layer waits for the pool once instead of three times per expert. Each output column is
    // still one thread's sum in the same order: the same bits as the products split by columns.
    VLMD_RETURN_IF_ERROR(ops::internal::ForJobs(pool, static_cast<int64_t>(s->active.size()),
                                                [&](int64_t job, int worker) {
                                                  return run(s->active[static_cast<size_t>(job)], nullptr,
                                                             &s->workers[static_cast<size_t>(worker)]);
                                                }));
  } else {
    for (int32_t e : s->active) VLMD_RETURN_IF_ERROR(run(e, pool, &s->workers[0]));
  }
  // out[r] = w_0 y_0 + w_1 y_1 + ... in rank order (llama.cpp's ggml_mul, then the adds).
  for (int64_t r = 0; r < n; ++r) {
    float* o = out + r * d;
    for (int64_t j = 0; j < n_used; ++j) {
      const float wj = s->weight[static_cast<size_t>(r * n_used + j)];
      const float* y = s->y.data() + (r * n_used + j) * d;
      if (j == 0) {
        for (int64_t i = 0; i < d; ++i) o[i] = wj * y[i];
      } else {
        for (int64_t i = 0; i < d; ++i) o[i] += wj * y[i];
      }
    }
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::models
