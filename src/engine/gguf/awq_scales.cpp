// AWQ scale search (see awq_scales.h).
#include "engine/gguf/awq_scales.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/tensor/quantize.h"

namespace vlmd::engine::gguf {
namespace {

constexpr int kGridSteps = 20;           // alpha = 0, 0.05, ..., 1 (AWQ's grid)
constexpr int64_t kSampledRows = 256;    // rows per matrix the search quantizes

// Rows of one matrix, dequantized, that the search quantizes at each alpha.
struct SampledMatrix {
  DType type = DType::kF32;      // what it will be quantized to
  std::vector<float> importance; // its quantizer's weights (empty: none)
  int64_t k = 0;
  int64_t n = 0;
  std::vector<float> rows;  // [n, k]
};

Result<SampledMatrix> Sample(const TensorInfo& t, const AwqTarget& target) {
  SampledMatrix m;
  m.type = target.type;
  m.importance = target.importance;
  m.k = t.ne[0];
  const int64_t stride = std::max<int64_t>(1, t.ne[1] / kSampledRows);
  const uint64_t row_bytes = *RowBytes(t.type, m.k);
  m.n = (t.ne[1] + stride - 1) / stride;
  m.rows.resize(static_cast<size_t>(m.n * m.k));
  for (int64_t i = 0; i < m.n; ++i) {
    VLMD_RETURN_IF_ERROR(
        DequantizeRow(t.type, t.data + i * stride * row_bytes, m.rows.data() + i * m.k, m.k));
  }
  return m;
}

// sum_j imp_j (W_ij - Q(W s)_ij / s_j)^2 over the sampled rows of every matrix, each quantized
// as it will be (weighted by its own importance / s^2 where it has one).
Result<double> WeightedError(const std::vector<SampledMatrix>& group, const std::vector<float>& imp,
                             const std::vector<float>& s) {
  const int64_t k = static_cast<int64_t>(s.size());
  std::vector<float> x(static_cast<size_t>(k)), back(static_cast<size_t>(k)), q_imp(static_cast<size_t>(k));
  double err = 0.0;
  for (const SampledMatrix& m : group) {
    if (!FindQuantizeRowFn(m.type) || m.type == DType::kF32) continue;  // kept exact
    const bool weighted = !m.importance.empty();
    for (int64_t j = 0; weighted && j < k; ++j) q_imp[j] = m.importance[j] / (s[j] * s[j]);
    std::vector<uint8_t> q(*RowBytes(m.type, k));
    for (int64_t r = 0; r < m.n; ++r) {
      const float* w = m.rows.data() + r * k;
      for (int64_t j = 0; j < k; ++j) x[j] = w[j] * s[j];
      VLMD_RETURN_IF_ERROR(QuantizeRowWeighted(m.type, x.data(), q.data(), k,
                                               weighted ? q_imp.data() : nullptr));
      VLMD_RETURN_IF_ERROR(DequantizeRow(m.type, q.data(), back.data(), k));
      for (int64_t j = 0; j < k; ++j) {
        const double d = double{w[j]} - double{back[j]} / s[j];
        err += imp[j] * d * d;
      }
    }
  }
  return err;
}

// s_j = a_j^alpha with a_j = sqrt(imp_j), normalized so that max(s) * min(s) = 1.
std::vector<float> ScalesFor(const std::vector<float>& imp, float alpha) {
  std::vector<float> s(imp.size());
  float lo = std::numeric_limits<float>::max(), hi = 0.0f;
  for (size_t j = 0; j < imp.size(); ++j) {
    s[j] = std::pow(std::max(imp[j], 1e-8f), 0.5f * alpha);
    lo = std::min(lo, s[j]);
    hi = std::max(hi, s[j]);
  }
  const float norm = 1.0f / std::sqrt(lo * hi);
  for (float& v : s) v = std::clamp(v * norm, 1e-4f, 1e4f);
  return s;
}

Status SearchGroup(const GgufFile& file, const ImportanceMatrix& stats,
                   const std::map<std::string, AwqTarget>& targets, float fixed_alpha, AwqGroup* g) {
  const std::vector<float> imp = stats.Importance(g->matrices.front());
  std::vector<SampledMatrix> sampled;
  for (const std::string& name : g->matrices) {
    const TensorInfo* t = file.FindTensor(name);
    if (t->ne[0] != static_cast<int64_t>(imp.size())) {
      return InvalidArgumentError("imatrix entry for '" + name + "' has " + std::to_string(imp.size()) +
                                  " values for " + std::to_string(t->ne[0]) +
                                  " columns (another model's imatrix?)");
    }
    const auto it = targets.find(name);
    const AwqTarget target = it == targets.end() ? AwqTarget{} : it->second;
    if (!target.importance.empty() && target.importance.size() != imp.size()) {
      return InvalidArgumentError("importance matrix entry for '" + name + "' does not fit it");
    }
    VLMD_ASSIGN_OR_RETURN(SampledMatrix m, Sample(*t, target));
    sampled.push_back(std::move(m));
  }
  // alpha 0 (s = 1) first: the plain error; then the grid, or only the fixed alpha.
  std::vector<float> alphas = {0.0f};
  for (int step = 1; step <= kGridSteps; ++step) {
    if (fixed_alpha < 0.0f) alphas.push_back(static_cast<float>(step) / kGridSteps);
  }
  if (fixed_alpha >= 0.0f) alphas.push_back(fixed_alpha);
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < alphas.size(); ++i) {
    std::vector<float> s = ScalesFor(imp, alphas[i]);
    VLMD_ASSIGN_OR_RETURN(double err, WeightedError(sampled, imp, s));
    if (i == 0) g->error_plain = err;
    // A fixed alpha is taken whatever its error; the search keeps the best.
    if (fixed_alpha >= 0.0f ? i + 1 == alphas.size() : err < best) {
      best = err;
      g->alpha = alphas[i];
      g->scales = std::move(s);
    }
  }
  g->error_scaled = best;
  return Status::Ok();
}

// The producer of a candidate group fits it: a norm of n_cols elements or ffn_up of n_cols rows,
// without a bias (dividing the weights alone would not divide the output then).
Status CheckProducer(const GgufFile& file, const AwqGroup& g, int64_t n_cols) {
  const TensorInfo* p = file.FindTensor(g.producer);
  const bool fits = g.producer_rows ? p->n_dims == 2 && p->ne[1] == n_cols
                                    : p->n_dims == 1 && p->ne[0] == n_cols;
  if (!fits) {
    return InvalidArgumentError("AWQ: '" + g.producer + "' does not have the " +
                                std::to_string(n_cols) + " outputs that '" + g.matrices.front() +
                                "' takes");
  }
  const std::string bias = g.producer.substr(0, g.producer.size() - 6) + "bias";  // ".weight"
  if (file.FindTensor(bias) != nullptr) {
    return InvalidArgumentError("AWQ: '" + bias + "' exists; folding scales into '" + g.producer +
                                "' alone would not be exact");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<AwqGroup>> SearchAwqScales(const GgufFile& file, const ImportanceMatrix& stats,
                                              const std::map<std::string, AwqTarget>& targets,
                                              ThreadPool* pool, float fixed_alpha) {
  if (fixed_alpha > 1.0f) {
    return InvalidArgumentError("AWQ alpha " + std::to_string(fixed_alpha) + " is not in [0, 1]");
  }
  // The groups below hold where each layer is: input RMSNorm -> q/k/v, a separate FFN RMSNorm
  // -> gate/up, and down fed by act(gate) * up. Architectures the engine runs, and only those.
  const auto arch = file.GetString("general.architecture");
  const std::string arch_name = arch.ok() ? std::string(*arch) : std::string("(none)");
  if (arch_name != "llama" && arch_name != "qwen2" && arch_name != "qwen2vl" &&
      arch_name != "qwen3vl" && arch_name != "gemma3") {
    return InvalidArgumentError("AWQ: architecture '" + arch_name +
                                "' is not one whose layers vlmd knows how to rescale (llama, "
                                "qwen2, qwen2vl, qwen3vl, gemma3)");
  }
  std::vector<AwqGroup> groups;
  for (int64_t l = 0;; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    if (file.FindTensor(b + "attn_norm.weight") == nullptr) break;
    const std::vector<AwqGroup> candidates = {
        {b + "attn_norm.weight", false, {b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"}},
        {b + "ffn_norm.weight", false, {b + "ffn_gate.weight", b + "ffn_up.weight"}},
        {b + "ffn_up.weight", true, {b + "ffn_down.weight"}},
    };
    // A block without ffn_norm (parallel attention and FFN on one norm) or without ffn_gate (a
    // plain MLP: act(up / s) != act(up) / s) would not fold exactly.
    if (file.FindTensor(b + "ffn_norm.weight") == nullptr ||
        file.FindTensor(b + "ffn_gate.weight") == nullptr) {
      return InvalidArgumentError("AWQ: layer " + std::to_string(l) +
                                  " has no ffn_norm or no ffn_gate; its scales would not fold exactly");
    }
    for (const AwqGroup& g : candidates) {
      const TensorInfo* producer = file.FindTensor(g.producer);
      bool usable = producer != nullptr && FindDequantizeRowFn(producer->type);
      for (const std::string& m : g.matrices) {
        const TensorInfo* t = file.FindTensor(m);
        usable = usable && t != nullptr && t->n_dims == 2 && FindDequantizeRowFn(t->type) &&
                 stats.entries.count(m) > 0 && stats.entries.at(m).counts.size() == 1;
      }
      if (!usable) continue;
      const int64_t n_cols = file.FindTensor(g.matrices.front())->ne[0];
      for (const std::string& m : g.matrices) {
        const DType type = file.FindTensor(m)->type;
        if (type != DType::kF32 && type != DType::kF16 && type != DType::kBF16) {
          return InvalidArgumentError("AWQ needs the float model (F32, F16 or BF16): '" + m +
                                      "' is " + std::string(DTypeName(type)));
        }
        if (file.FindTensor(m)->ne[0] != n_cols) {
          return InvalidArgumentError("AWQ: '" + m + "' and '" + g.matrices.front() +
                                      "' take inputs of different widths");
        }
      }
      VLMD_RETURN_IF_ERROR(CheckProducer(file, g, n_cols));
      groups.push_back(g);
    }
  }
  std::vector<Status> status(groups.size());
  auto work = [&](int64_t i, int) {
    status[static_cast<size_t>(i)] = SearchGroup(file, stats, targets, fixed_alpha, &groups[static_cast<size_t>(i)]);
  };
  if (pool) {
    pool->ParallelFor(static_cast<int64_t>(groups.size()), work);
  } else {
    for (size_t i = 0; i < groups.size(); ++i) work(static_cast<int64_t>(i), 0);
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    VLMD_RETURN_IF_ERROR(status[i].WithContext("AWQ scales of '" + groups[i].producer + "'"));
  }
  return groups;
}

}  // namespace vlmd::engine::gguf
