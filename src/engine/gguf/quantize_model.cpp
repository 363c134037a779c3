// Model re-quantization (see quantize_model.h).
#include "engine/gguf/quantize_model.h"

#include <cmath>
#include <list>
#include <map>
#include <memory>
#include <regex>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/tensor/quantize.h"
#include "engine/tensor/type_policy.h"

namespace vlmd::engine::gguf {
namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct RowErrorSums {
  double diff2 = 0.0;  // sum (w - wq)^2
  double ref2 = 0.0;   // sum w^2
};

// AWQ rewrites of one tensor: its columns multiplied, its rows divided (null: none).
struct TensorScales {
  const std::vector<float>* columns = nullptr;
  const std::vector<float>* rows = nullptr;
};

// Rows [r0, r1) of t quantized to `to` into dst, accumulating the error against the (scaled)
// source rows. importance: nullptr, k values for every row, or with rows_per_importance > 0 one
// set of k values per that many rows (the experts of a 3-D tensor, as llama.cpp's imatrix keeps
// them).
Status QuantizeRows(const TensorInfo& t, DType to, const float* importance, int64_t rows_per_importance,
                    TensorScales scales, uint8_t* dst, int64_t r0, int64_t r1, RowErrorSums* sums) {
  const int64_t k = t.ne[0];
  const uint64_t src_row = *RowBytes(t.type, k);
  const uint64_t dst_row = *RowBytes(to, k);
  std::vector<float> row(static_cast<size_t>(k)), back(static_cast<size_t>(k));
  for (int64_t r = r0; r < r1; ++r) {
    VLMD_RETURN_IF_ERROR(DequantizeRow(t.type, t.data + r * src_row, row.data(), k));
    if (scales.columns) {
      for (int64_t i = 0; i < k; ++i) row[i] *= (*scales.columns)[static_cast<size_t>(i)];
    }
    if (scales.rows) {
      const float inv = 1.0f / (*scales.rows)[static_cast<size_t>(r)];
      for (int64_t i = 0; i < k; ++i) row[i] *= inv;
    }
    uint8_t* out = dst + r * dst_row;
    const float* imp = importance != nullptr && rows_per_importance > 0
                           ? importance + (r / rows_per_importance) * k
                           : importance;
    VLMD_RETURN_IF_ERROR(QuantizeRowWeighted(to, row.data(), out, k, imp)
                             .WithContext("row " + std::to_string(r)));
    VLMD_RETURN_IF_ERROR(DequantizeRow(to, out, back.data(), k));
    for (int64_t i = 0; i < k; ++i) {
      const double d = double(row[i]) - double(back[i]);
      sums->diff2 += d * d;
      sums->ref2 += double(row[i]) * double(row[i]);
    }
  }
  return Status::Ok();
}

// The type `name` gets: the first matching override's, else the default.
DType TargetType(const QuantizeOptions& opts, const std::vector<std::regex>& patterns,
                 const std::string& name) {
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (std::regex_search(name, patterns[i])) return opts.overrides[i].type;
  }
  return opts.type;
}

}  // namespace

Result<TensorTypeOverride> ParseTensorTypeOverride(std::string_view text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    return InvalidArgumentError("tensor type override '" + std::string(text) +
                                "' is not PATTERN=TYPE");
  }
  TensorTypeOverride o;
  o.pattern = std::string(text.substr(0, eq));
  const auto type = ParseDType(text.substr(eq + 1));
  if (!type || !FindQuantizeRowFn(*type)) {
    return InvalidArgumentError("tensor type override '" + std::string(text) + "': cannot write type '" +
                                std::string(text.substr(eq + 1)) + "'");
  }
  o.type = *type;
  try {
    std::regex check(o.pattern);
  } catch (const std::regex_error& e) {
    return InvalidArgumentError("tensor type override '" + std::string(text) + "': bad pattern (" +
                                e.what() + ")");
  }
  return o;
}

bool IsQuantizableWeight(const std::string& name, int n_dims) {
  // Matrices, and the experts' matrices of a mixture of experts stacked in 3-D ([k, n, n_expert]).
  if ((n_dims != 2 && n_dims != 3) || !EndsWith(name, ".weight")) return false;
  // Embeddings that are added, not multiplied, stay exact (llama.cpp keeps them F32 too), and so
  // does a MoE router (ffn_gate_inp): its logits choose the experts (llama.cpp never quantizes it).
  for (std::string_view keep : {"position_embd", "patch_embd", "class_embd", "ffn_gate_inp"}) {
    if (name.find(keep) != std::string::npos) return false;
  }
  return true;
}

Result<QuantizeModelReport> QuantizeModel(const std::string& in_path, const std::string& out_path,
                                          const QuantizeOptions& opts, ThreadPool* pool) {
  const DType type = opts.type;
  const ImportanceMatrix* imatrix = opts.imatrix;
  if (!FindQuantizeRowFn(type)) {
    return InvalidArgumentError("cannot quantize to " + std::string(DTypeName(type)));
  }
  std::vector<std::regex> patterns;
  for (const TensorTypeOverride& o : opts.overrides) {
    if (!FindQuantizeRowFn(o.type)) {
      return InvalidArgumentError("cannot quantize to " + std::string(DTypeName(o.type)));
    }
    try {
      patterns.emplace_back(o.pattern);
    } catch (const std::regex_error& e) {
      return InvalidArgumentError("tensor type pattern '" + o.pattern + "': " + e.what());
    }
  }
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::Open(in_path));

  GgufWriter w;
  for (const MetadataEntry& e : in->metadata()) {
    if (e.key == "general.alignment") continue;  // the writer owns it
    w.SetValue(e.key, e.value);
  }
  w.SetU32("general.file_type", GgufFileType(type));
  w.SetString("general.quantized_by", "vlmd-quantize");

  QuantizeModelReport report;
  if (opts.awq != nullptr) {
    std::map<std::string, AwqTarget> targets;  // how each matrix will be quantized
    for (const TensorInfo& t : in->tensors()) {
      const std::string name(t.name);
      if (!IsQuantizableWeight(name, t.n_dims)) continue;
      bool fell_back = false;
      AwqTarget& target = targets[name];
      target.type = TypeForRowLength(TargetType(opts, patterns, name), t.ne[0], &fell_back);
      if (imatrix != nullptr && QuantizeUsesImportance(target.type)) {
        target.importance = imatrix->Importance(name);
      }
    }
    VLMD_ASSIGN_OR_RETURN(report.awq_groups,
                          SearchAwqScales(*in, *opts.awq, targets, pool, opts.awq_alpha));
  }
  // Each AWQ group's scales, by the tensor they rewrite.
  std::map<std::string, TensorScales> scaled;
  for (const AwqGroup& g : report.awq_groups) {
    for (const std::string& m : g.matrices) scaled[m].columns = &g.scales;
    scaled[g.producer].rows = &g.scales;  // a norm's elements are its rows of one value
  }
  std::list<std::vector<uint8_t>> buffers;  // quantized data, alive until WriteFile
  for (const TensorInfo& t : in->tensors()) {
    TensorQuantReport tr;
    tr.name = std::string(t.name);
    tr.shape.assign(t.ne, t.ne + t.n_dims);
    tr.from = t.type;
    report.bytes_in += t.nbytes;
    const std::span<const int64_t> ne(t.ne, static_cast<size_t>(t.n_dims));
    const DType target = TargetType(opts, patterns, tr.name);
    const auto sc = scaled.find(tr.name);
    const TensorScales scales = sc == scaled.end() ? TensorScales{} : sc->second;
    tr.awq_scaled = sc != scaled.end();
    if (tr.awq_scaled && t.n_dims == 1) {  // a norm's weights divided by the scales: F32
      auto& out = buffers.emplace_back(static_cast<size_t>(t.ne[0]) * sizeof(float));
      auto* v = reinterpret_cast<float*>(out.data());
      VLMD_RETURN_IF_ERROR(DequantizeRow(t.type, t.data, v, t.ne[0]));
      for (int64_t i = 0; i < t.ne[0]; ++i) v[i] /= (*scales.rows)[static_cast<size_t>(i)];
      tr.to = DType::kF32;
      VLMD_RETURN_IF_ERROR(w.AddTensorView(t.name, DType::kF32, ne, out));
      report.bytes_out += out.size();
      report.tensors.push_back(std::move(tr));
      continue;
    }
    if (!IsQuantizableWeight(tr.name, t.n_dims) || (t.type == target && !tr.awq_scaled)) {
      tr.to = t.type;
      VLMD_RETURN_IF_ERROR(w.AddTensorView(t.name, t.type, ne, {t.data, t.nbytes}));
      report.bytes_out += t.nbytes;
      report.tensors.push_back(std::move(tr));
      continue;
    }
    if (!FindDequantizeRowFn(t.type)) {
      return InvalidArgumentError("tensor '" + tr.name + "': cannot read type " +
                                  std::string(DTypeName(t.type)));
    }
    tr.to = TypeForRowLength(target, t.ne[0], &tr.fell_back);
    tr.quantized = true;
    std::vector<float> importance;
    if (imatrix != nullptr) importance = imatrix->Importance(tr.name);
    // One importance per column, of each expert for a 3-D tensor (llama-quantize refuses any
    // other size there too).
    const int64_t n_mats = t.n_dims == 3 ? t.ne[2] : 1;
    const auto n_imp = static_cast<int64_t>(importance.size());
    if (!importance.empty() && n_imp != t.ne[0] * n_mats) {
      return InvalidArgumentError("imatrix entry for '" + tr.name + "' has " +
                                  std::to_string(importance.size()) + " values for " +
                                  std::to_string(t.ne[0]) + " columns" +
                                  (n_mats > 1 ? " of " + std::to_string(n_mats) + " experts" : "") +
                                  " (another model's imatrix?)");
    }
    const int64_t rows_per_importance = n_mats > 1 ? t.ne[1] : 0;
    tr.weighted = !importance.empty() && QuantizeUsesImportance(tr.to);
    if (tr.weighted && scales.columns) {  // the scaled columns' inputs are x / s
      // Its size is n_cols, and so is the importance's: AWQ scales only 2-D matrices (it refuses
      // mixture-of-experts decoders).
      const std::vector<float>& s = *scales.columns;
      for (size_t i = 0; i < importance.size(); ++i) importance[i] /= s[i] * s[i];
    }
    const float* imp = tr.weighted ? importance.data() : nullptr;
    const int64_t n_rows = t.ne[1] * n_mats;
    auto& out = buffers.emplace_back(*RowBytes(tr.to, t.ne[0]) * static_cast<uint64_t>(n_rows));
    const int n_threads = pool ? pool->size() : 1;
    std::vector<RowErrorSums> sums(static_cast<size_t>(n_threads));
    std::vector<Status> status(static_cast<size_t>(n_threads));
    auto work = [&](int64_t part, int) {
      int64_t r0, r1;
      SplitRange(n_rows, n_threads, part, 1, &r0, &r1);
      status[part] = QuantizeRows(t, tr.to, imp, rows_per_importance, scales, out.data(), r0, r1,
                                  &sums[part]);
    };
    if (pool) {
      pool->ParallelFor(n_threads, work);
    } else {
      work(0, 0);
    }
    RowErrorSums total;
    for (int i = 0; i < n_threads; ++i) {
      VLMD_RETURN_IF_ERROR(status[i].WithContext("tensor '" + tr.name + "'"));
      total.diff2 += sums[i].diff2;
      total.ref2 += sums[i].ref2;
    }
    tr.rel_error = total.ref2 > 0 ? std::sqrt(total.diff2 / total.ref2) : 0.0;
    VLMD_RETURN_IF_ERROR(w.AddTensorView(t.name, tr.to, ne, out));
    report.bytes_out += out.size();
    report.tensors.push_back(std::move(tr));
  }
  VLMD_RETURN_IF_ERROR(w.WriteFile(out_path));
  return report;
}

}  // namespace vlmd::engine::gguf
