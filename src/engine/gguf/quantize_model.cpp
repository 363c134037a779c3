// Model re-quantization (see quantize_model.h).
#include "engine/gguf/quantize_model.h"

#include <cmath>
#include <list>
#include <memory>

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

// Quantizes rows [r0, r1) of `src` (type `from`) into `dst` (type `to`), accumulating the error.
Status QuantizeRows(const TensorInfo& t, DType to, const float* importance, uint8_t* dst,
                    int64_t r0, int64_t r1, RowErrorSums* sums) {
  const int64_t k = t.ne[0];
  const uint64_t src_row = *RowBytes(t.type, k);
  const uint64_t dst_row = *RowBytes(to, k);
  std::vector<float> row(static_cast<size_t>(k)), back(static_cast<size_t>(k));
  for (int64_t r = r0; r < r1; ++r) {
    VLMD_RETURN_IF_ERROR(DequantizeRow(t.type, t.data + r * src_row, row.data(), k));
    uint8_t* out = dst + r * dst_row;
    VLMD_RETURN_IF_ERROR(QuantizeRowWeighted(to, row.data(), out, k, importance));
    VLMD_RETURN_IF_ERROR(DequantizeRow(to, out, back.data(), k));
    for (int64_t i = 0; i < k; ++i) {
      const double d = double(row[i]) - double(back[i]);
      sums->diff2 += d * d;
      sums->ref2 += double(row[i]) * double(row[i]);
    }
  }
  return Status::Ok();
}

}  // namespace

bool IsQuantizableWeight(const std::string& name, int n_dims) {
  if (n_dims != 2 || !EndsWith(name, ".weight")) return false;
  // Embeddings that are added, not multiplied, stay exact (llama.cpp keeps them F32 too).
  for (std::string_view keep : {"position_embd", "patch_embd", "class_embd"}) {
    if (name.find(keep) != std::string::npos) return false;
  }
  return true;
}

Result<QuantizeModelReport> QuantizeModel(const std::string& in_path, const std::string& out_path,
                                          DType type, ThreadPool* pool,
                                          const ImportanceMatrix* imatrix) {
  if (!FindQuantizeRowFn(type)) {
    return InvalidArgumentError("cannot quantize to " + std::string(DTypeName(type)));
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
  std::list<std::vector<uint8_t>> buffers;  // quantized data, alive until WriteFile
  for (const TensorInfo& t : in->tensors()) {
    TensorQuantReport tr;
    tr.name = std::string(t.name);
    tr.shape.assign(t.ne, t.ne + t.n_dims);
    tr.from = t.type;
    report.bytes_in += t.nbytes;
    const std::span<const int64_t> ne(t.ne, static_cast<size_t>(t.n_dims));
    if (!IsQuantizableWeight(tr.name, t.n_dims) || t.type == type) {
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
    tr.to = TypeForRowLength(type, t.ne[0], &tr.fell_back);
    tr.quantized = true;
    std::vector<float> importance;
    if (imatrix != nullptr) importance = imatrix->Importance(tr.name);
    if (!importance.empty() && static_cast<int64_t>(importance.size()) != t.ne[0]) {
      return InvalidArgumentError("imatrix entry for '" + tr.name + "' has " +
                                  std::to_string(importance.size()) + " values for " +
                                  std::to_string(t.ne[0]) + " columns (another model's imatrix?)");
    }
    tr.weighted = !importance.empty() && QuantizeUsesImportance(tr.to);
    const float* imp = tr.weighted ? importance.data() : nullptr;
    const int64_t n_rows = t.ne[1];
    auto& out = buffers.emplace_back(*RowBytes(tr.to, t.ne[0]) * static_cast<uint64_t>(n_rows));
    const int n_threads = pool ? pool->size() : 1;
    std::vector<RowErrorSums> sums(static_cast<size_t>(n_threads));
    std::vector<Status> status(static_cast<size_t>(n_threads));
    auto work = [&](int64_t part, int) {
      int64_t r0, r1;
      SplitRange(n_rows, n_threads, part, 1, &r0, &r1);
      status[part] = QuantizeRows(t, tr.to, imp, out.data(), r0, r1, &sums[part]);
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
