// Mixture-of-experts feed-forward (see moe_ffn.h). Each expert runs once per call on the rows
// that chose it (gathered), so a prompt's experts read their weights once per chunk and a
// decode step reads only the chosen experts' weights.
#include "engine/models/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "engine/ops/activation.h"

namespace vlmd::engine::models {
namespace {

template <typename T>
void Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// Softmax of one row in place as ggml's soft_max computes it (exp of x - max, the sum in double,
// one multiply by its f32 inverse); false when a logit is not finite.
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

}  // namespace

ops::WeightView RouteForRows(const ops::WeightView& w, bool prompt_rows) {
  ops::WeightView v = w;
  if (v.packed_tile_route != ops::PackedTileRoute::kNever) {
    v.packed_tile_route = prompt_rows ? ops::PackedTileRoute::kAlways : ops::PackedTileRoute::kNever;
  }
  return v;
}

Status MoeFeedForward(const kernels::KernelTable& kt, ThreadPool* pool, const MoeWeights& w,
                      const float* xn, int64_t n, int64_t d, bool prompt_rows, MoeScratch* s,
                      ops::MatmulScratch* mm, float* out) {
  const int64_t n_expert = w.router.n, k = w.n_used, ff = w.d_ff;
  if (n < 1) return Status::Ok();
  // Router: logits, probabilities, the k most probable (ties to the lower id), renormalized.
  Grow(s->logits, n * n_expert);
  Grow(s->chosen, n * k);
  Grow(s->weight, n * k);
  VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, w.router, xn, n, d, s->logits.data(), n_expert, mm));
  std::vector<int32_t> ids(static_cast<size_t>(n_expert));
  for (int64_t r = 0; r < n; ++r) {
    float* p = s->logits.data() + r * n_expert;
    if (!SoftmaxRow(p, n_expert)) {
      return InvalidArgumentError("expert router logits of row " + std::to_string(r) +
                                  " are not finite");
    }
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0.0;  // ggml_sum_rows accumulates in double, then rounds to f32
    for (int64_t j = 0; j < k; ++j) sum += p[ids[static_cast<size_t>(j)]];
    const float total = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[static_cast<size_t>(j)];
      s->chosen[static_cast<size_t>(r * k + j)] = e;
      s->weight[static_cast<size_t>(r * k + j)] = p[e] / total;
    }
  }
  // Entries (row, rank) grouped by expert: a counting sort, rows ascending within an expert.
  s->first.assign(static_cast<size_t>(n_expert + 1), 0);
  for (int64_t i = 0; i < n * k; ++i) ++s->first[static_cast<size_t>(s->chosen[static_cast<size_t>(i)] + 1)];
  for (int64_t e = 0; e < n_expert; ++e) s->first[static_cast<size_t>(e + 1)] += s->first[static_cast<size_t>(e)];
  Grow(s->entry, n * k);
  {
    std::vector<int32_t> next(s->first.begin(), s->first.end() - 1);
    for (int64_t i = 0; i < n * k; ++i) {
      const int32_t e = s->chosen[static_cast<size_t>(i)];
      s->entry[static_cast<size_t>(next[static_cast<size_t>(e)]++)] = static_cast<int32_t>(i);
    }
  }
  // Each chosen expert on its rows; outputs to y[row * k + rank].
  int64_t max_rows = 0;
  for (int64_t e = 0; e < n_expert; ++e) {
    max_rows = std::max<int64_t>(max_rows, s->first[static_cast<size_t>(e + 1)] - s->first[static_cast<size_t>(e)]);
  }
  Grow(s->in, max_rows * d);
  Grow(s->hidden, max_rows * ff);
  Grow(s->gate_up, max_rows * 2 * ff);
  Grow(s->y, n * k * d);
  for (int64_t e = 0; e < n_expert; ++e) {
    const int32_t e0 = s->first[static_cast<size_t>(e)], e1 = s->first[static_cast<size_t>(e + 1)];
    const int64_t m = e1 - e0;
    if (m == 0) continue;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = s->entry[static_cast<size_t>(e0 + i)] / k;
      std::copy_n(xn + row * d, d, s->in.data() + i * d);
    }
    const auto ue = static_cast<size_t>(e);
    if (w.gate_up[ue].packed != nullptr && kt.packed_matmul != nullptr) {
      VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, RouteForRows(w.gate_up[ue], prompt_rows), s->in.data(),
                                       m, d, s->gate_up.data(), 2 * ff, mm));
      VLMD_RETURN_IF_ERROR(ops::SwiGluRows(kt, pool, s->gate_up.data(), m, ff, s->hidden.data()));
    } else {
      float* up = s->gate_up.data();
      VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, RouteForRows(w.gate[ue], prompt_rows), s->in.data(),
                                       m, d, s->hidden.data(), ff, mm));
      VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, RouteForRows(w.up[ue], prompt_rows), s->in.data(),
                                       m, d, up, ff, mm));
      VLMD_RETURN_IF_ERROR(ops::SwiGlu(kt, pool, s->hidden.data(), up, s->hidden.data(), m * ff));
    }
    // The down projection into the gathered-rows buffer (its input is in `hidden`), then each
    // row's output to its (row, rank) place.
    VLMD_RETURN_IF_ERROR(ops::MatMul(kt, pool, RouteForRows(w.down[ue], prompt_rows), s->hidden.data(),
                                     m, ff, s->in.data(), d, mm));
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(s->in.data() + i * d, d, s->y.data() + static_cast<int64_t>(s->entry[static_cast<size_t>(e0 + i)]) * d);
    }
  }
  // out[r] = w_0 y_0 + w_1 y_1 + ... in rank order (llama.cpp's ggml_mul, then the adds).
  for (int64_t r = 0; r < n; ++r) {
    float* o = out + r * d;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = s->weight[static_cast<size_t>(r * k + j)];
      const float* y = s->y.data() + (r * k + j) * d;
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
