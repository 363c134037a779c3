// Tensor lookup with shape checks (see weights.h).
#include "engine/models/weights.h"

#include <algorithm>
#include <string>

#include "engine/tensor/quantize.h"

namespace vlmd::engine::models {
namespace {

std::string ShapeString(const int64_t* ne, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

Status CheckShape(const gguf::TensorInfo& t, std::initializer_list<int64_t> shape) {
  // No model tensor is empty; an empty one would also satisfy a shape computed from a bad
  // hyperparameter (0), and divide by its row length of 0 further on.
  for (int i = 0; i < t.n_dims; ++i) {
    if (t.ne[i] < 1) {
      return InvalidArgumentError("tensor '" + std::string(t.name) + "' has shape " +
                                  ShapeString(t.ne, t.n_dims) + ": an empty dimension");
    }
  }
  bool same = static_cast<int>(shape.size()) == t.n_dims;
  int i = 0;
  for (int64_t d : shape) same = same && t.ne[i++] == d;
  if (!same) {
    std::vector<int64_t> want(shape);
    return InvalidArgumentError("tensor '" + std::string(t.name) + "' has shape " +
                                ShapeString(t.ne, t.n_dims) + ", expected " +
                                ShapeString(want.data(), static_cast<int>(want.size())));
  }
  return Status::Ok();
}

}  // namespace

Result<ops::WeightView> GetMatrix(const gguf::GgufFile& file, const std::string& name, int64_t k,
                                  int64_t n) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return NotFoundError("model tensor '" + name + "' is missing");
  VLMD_RETURN_IF_ERROR(CheckShape(*t, {k, n}));
  if (!GetDTypeTraits(t->type).compute_supported || !FindDequantizeRowFn(t->type)) {
    return UnimplementedError("tensor '" + name + "' has type " +
                              std::string(DTypeName(t->type)) + ", which vlmd cannot compute with");
  }
  return ops::WeightView{.dtype = t->type, .n = n, .k = k, .data = t->data,
                         .row_bytes = static_cast<size_t>(*RowBytes(t->type, k)), .name = t->name};
}

Result<ops::WeightView> GetExpertMatrices(const gguf::GgufFile& file, const std::string& name,
                                          int64_t k, int64_t n, int64_t n_expert) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return NotFoundError("model tensor '" + name + "' is missing");
  VLMD_RETURN_IF_ERROR(CheckShape(*t, {k, n, n_expert}));
  if (!GetDTypeTraits(t->type).compute_supported || !FindDequantizeRowFn(t->type)) {
    return UnimplementedError("tensor '" + name + "' has type " +
                              std::string(DTypeName(t->type)) + ", which vlmd cannot compute with");
  }
  return ops::WeightView{.dtype = t->type, .n = n * n_expert, .k = k, .data = t->data,
                         .row_bytes = static_cast<size_t>(*RowBytes(t->type, k)), .name = t->name};
}

namespace {

// The tensor `name` of exactly `shape`, checked, dequantized into out (resized).
template <typename Vec>
Status DequantizeTensorInto(const gguf::GgufFile& file, const std::string& name,
                            std::initializer_list<int64_t> shape, Vec* out) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return NotFoundError("model tensor '" + name + "' is missing");
  VLMD_RETURN_IF_ERROR(CheckShape(*t, shape));
  const int64_t row = t->ne[0];
  const int64_t n_rows = t->n_elements() / row;
  auto row_bytes = RowBytes(t->type, row);
  if (!row_bytes || !FindDequantizeRowFn(t->type)) {
    return UnimplementedError("tensor '" + name + "' has unsupported type " +
                              std::string(DTypeName(t->type)));
  }
  out->assign(static_cast<size_t>(t->n_elements()), 0.0f);
  for (int64_t r = 0; r < n_rows; ++r) {
    VLMD_RETURN_IF_ERROR(DequantizeRow(t->type, t->data + r * *row_bytes, out->data() + r * row, row));
  }
  return Status::Ok();
}

}  // namespace

Result<F32Weights> GetF32(const gguf::GgufFile& file, const std::string& name,
                                  std::initializer_list<int64_t> shape) {
  F32Weights out;
  VLMD_RETURN_IF_ERROR(DequantizeTensorInto(file, name, shape, &out));
  return out;
}

Status GetF32Into(const gguf::GgufFile& file, const std::string& name,
                  std::initializer_list<int64_t> shape, F32WeightsOwnMapping* out) {
  return DequantizeTensorInto(file, name, shape, out);
}

Result<F32Weights> GetOptionalF32(const gguf::GgufFile& file, const std::string& name,
                                          std::initializer_list<int64_t> shape) {
  if (file.FindTensor(name) == nullptr) return F32Weights{};
  return GetF32(file, name, shape);
}

Status RefuseUnusedTensors(const gguf::GgufFile& file, std::string_view what) {
  const std::vector<std::string_view> unused = file.TensorsNeverLookedUp();
  if (unused.empty()) return Status::Ok();
  std::string names;
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < std::min(unused.size(), kShown); ++i) {
    names += (i > 0 ? ", " : "") + std::string(unused[i]);
  }
  if (unused.size() > kShown) names += ", ... (" + std::to_string(unused.size()) + " in all)";
  return UnimplementedError(std::string(what) + ": the file has tensors vlmd does not use, so it " +
                            "is a variant vlmd does not run (it would run without them and give " +
                            "wrong answers): " + names);
}

void SkipTensors(const gguf::GgufFile& file, std::string_view prefix) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (std::string_view(t.name).starts_with(prefix)) file.FindTensor(t.name);
  }
}

Status DequantizeMatrixRow(const ops::WeightView& w, int64_t row, float* out) {
  if (row < 0 || row >= w.n) {
    return OutOfRangeError("row " + std::to_string(row) + " outside [0, " + std::to_string(w.n) + ")");
  }
  const auto* base = static_cast<const uint8_t*>(w.data);
  return DequantizeRow(w.dtype, base + row * w.row_bytes, out, w.k);
}

ops::WeightView RowsOf(const ops::WeightView& w, int64_t r0, int64_t n) {
  ops::WeightView part = w;
  part.data = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * w.row_bytes;
  part.n = n;
  return part;
}

uint64_t ReleaseRows(const gguf::GgufFile& file, const ops::WeightView& w) {
  if (w.data == nullptr || w.n < 1) return 0;
  const auto dense = RowBytes(w.dtype, w.k);
  if (!dense) return 0;
  const uint64_t row_bytes = w.row_bytes != 0 ? w.row_bytes : static_cast<uint64_t>(*dense);
  return file.ReleasePages(w.data, row_bytes * static_cast<uint64_t>(w.n));
}

uint64_t ReleasePackedRows(const gguf::GgufFile& file, const ops::WeightView& w) {
  if (w.packed == nullptr && w.tiles == nullptr) return 0;
  return ReleaseRows(file, w);
}

Result<ops::WeightView> GetPatchKernel(const gguf::GgufFile& f, const std::string& name, int64_t p,
                                       int64_t d) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return NotFoundError("model tensor '" + name + "' is missing");
  if (t->n_dims != 4 || t->ne[0] != p || t->ne[1] != p || t->ne[2] != 3 || t->ne[3] != d) {
    return InvalidArgumentError("tensor '" + name + "' has shape [" + std::to_string(t->ne[0]) +
                                ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) +
                                ", " + std::to_string(t->ne[3]) + "], expected [" +
                                std::to_string(p) + ", " + std::to_string(p) + ", 3, " +
                                std::to_string(d) + "]");
  }
  auto row_bytes = RowBytes(t->type, 3 * p * p);
  if (!row_bytes || !GetDTypeTraits(t->type).compute_supported) {
    return UnimplementedError("tensor '" + name + "' has a type vlmd cannot compute with");
  }
  return ops::WeightView{.dtype = t->type, .n = d, .k = 3 * p * p, .data = t->data,
                         .row_bytes = static_cast<size_t>(*row_bytes), .name = t->name};
}


}  // namespace vlmd::engine::models
