// Re-quantizes a GGUF model into another weight type (the engine of vlmd-quantize): 2-D weight
// matrices get the target type (or a fallback where their rows do not fit its block), norms,
// biases, position/patch/class embeddings and other small tensors are kept in F32 (or as they
// are), and metadata is carried over with general.file_type updated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/gguf/imatrix.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::gguf {

struct TensorQuantReport {
  std::string name;
  std::vector<int64_t> shape;   // ggml order
  DType from = DType::kF32;
  DType to = DType::kF32;
  bool quantized = false;       // false: copied as is (or converted to F32)
  bool fell_back = false;       // the requested type did not fit the row length
  bool weighted = false;        // quantized with the importance matrix's entry for it
  double rel_error = 0.0;       // ||W - Wq|| / ||W|| over the whole tensor (0 when copied)
};

struct QuantizeModelReport {
  std::vector<TensorQuantReport> tensors;
  uint64_t bytes_in = 0;   // tensor data bytes read
  uint64_t bytes_out = 0;  // tensor data bytes written
};

// Reads `in_path`, writes `out_path` with 2-D weights in `type`. `pool` may be null (one thread).
// With `imatrix`, a matrix that has an entry there is quantized weighted by it where the type
// allows (QuantizeUsesImportance), as llama-quantize --imatrix does. NOT_FOUND / DATA_LOSS for a
// bad input, INVALID_ARGUMENT when `type` cannot be written, a source tensor type cannot be
// dequantized or an imatrix entry does not fit its matrix, UNAVAILABLE on write errors.
Result<QuantizeModelReport> QuantizeModel(const std::string& in_path, const std::string& out_path,
                                          DType type, ThreadPool* pool,
                                          const ImportanceMatrix* imatrix = nullptr);

// Whether a tensor of this name and shape is a weight matrix that quantization applies to.
bool IsQuantizableWeight(const std::string& name, int n_dims);

}  // namespace vlmd::engine::gguf
