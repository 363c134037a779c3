// Re-quantizes a GGUF model into another weight type (the engine of vlmd-quantize): 2-D weight
// matrices get the target type (or a fallback where their rows do not fit its block), norms,
// biases, position/patch/class embeddings and other small tensors are kept in F32 (or as they
// are), and metadata is carried over with general.file_type updated.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/gguf/awq_scales.h"
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
  bool awq_scaled = false;      // rewritten by an AWQ scale (columns, rows or norm elements)
  double rel_error = 0.0;       // ||W - Wq|| / ||W|| over the whole tensor (0 when copied)
};

struct QuantizeModelReport {
  std::vector<TensorQuantReport> tensors;
  uint64_t bytes_in = 0;   // tensor data bytes read
  uint64_t bytes_out = 0;  // tensor data bytes written
  std::vector<AwqGroup> awq_groups;  // with QuantizeOptions::awq
};

// Another type for the weights whose name matches `pattern` (ECMAScript regex, searched in the
// name as llama-quantize --tensor-type does: "attn_v" or "blk\\.[0-3]\\.ffn_down").
struct TensorTypeOverride {
  std::string pattern;
  DType type = DType::kF16;
};

struct QuantizeOptions {
  DType type = DType::kQ8_0;  // every quantizable weight, unless an override names it
  std::vector<TensorTypeOverride> overrides{};  // the first that matches a weight wins
  // A matrix that has an entry here is quantized weighted by it where its type allows
  // (QuantizeUsesImportance), as llama-quantize --imatrix does.
  const ImportanceMatrix* imatrix = nullptr;
  // Activation statistics (an importance matrix) for AWQ scaling of the text model's matrix
  // groups before quantization (awq_scales.h); null: none.
  const ImportanceMatrix* awq = nullptr;
  float awq_alpha = -1.0f;  // in [0, 1]: this alpha for every group instead of the search
};

// Parses "PATTERN=TYPE" (the --tensor-type argument). INVALID_ARGUMENT for a missing '=', a bad
// regex or a type that cannot be written.
Result<TensorTypeOverride> ParseTensorTypeOverride(std::string_view text);

// Reads `in_path`, writes `out_path` with 2-D weights and 3-D expert weights in their types.
// `pool` may be null (one thread). NOT_FOUND / DATA_LOSS for a bad input, INVALID_ARGUMENT when a
// type cannot be written, a source tensor type cannot be dequantized or an imatrix entry does not
// fit its matrix, UNAVAILABLE on write errors.
Result<QuantizeModelReport> QuantizeModel(const std::string& in_path, const std::string& out_path,
                                          const QuantizeOptions& opts, ThreadPool* pool);

// Whether a tensor of this name and shape is a weight matrix (or a stack of experts' matrices)
// that quantization applies to; never a MoE router (ffn_gate_inp) or an added embedding.
bool IsQuantizableWeight(const std::string& name, int n_dims);

}  // namespace vlmd::engine::gguf
