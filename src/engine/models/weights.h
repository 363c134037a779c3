// Looking up model tensors in a GGUF file with shape checks: matrices stay in the file's type
// (zero-copy views into the mapping), small vectors (norms, biases) are converted to owned f32.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/large_alloc.h"
#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

// An owned f32 copy of model weights (a norm, a bias, an embedding table, a folded matrix): in
// large_alloc's chunks, so a sealed model's protected mode covers it like the packed matrices.
using F32Weights = std::vector<float, LargeAllocator<float>>;
// The same for a large copy that is dropped while the model lives on (a folded matrix replaced
// by its packed copy): a mapping of its own, so its memory goes back to the OS when dropped.
using F32WeightsOwnMapping = std::vector<float, LargeAllocator<float, LargePlacement::kOwnMapping>>;

// The matrix `name` with ggml shape [k, n] (k = row length) as a matmul weight view. NOT_FOUND
// naming the tensor when absent; INVALID_ARGUMENT when its shape differs; UNIMPLEMENTED when
// vlmd cannot compute with its type.
Result<ops::WeightView> GetMatrix(const gguf::GgufFile& file, const std::string& name, int64_t k,
                                  int64_t n);

// The tensor `name` of exactly `shape` (ggml order) dequantized to f32. Same errors as GetMatrix.
Result<F32Weights> GetF32(const gguf::GgufFile& file, const std::string& name,
                                  std::initializer_list<int64_t> shape);

// As GetF32, into a vector of any allocator (`out` is resized).
Status GetF32Into(const gguf::GgufFile& file, const std::string& name,
                  std::initializer_list<int64_t> shape, F32WeightsOwnMapping* out);

// As GetF32, but an absent tensor gives an empty vector (optional biases).
Result<F32Weights> GetOptionalF32(const gguf::GgufFile& file, const std::string& name,
                                          std::initializer_list<int64_t> shape);

// The experts' matrices `name` with ggml shape [k, n, n_expert] (ffn_*_exps) as one view of
// n * n_expert rows: expert e is RowsOf(view, e * n, n). Same errors as GetMatrix.
Result<ops::WeightView> GetExpertMatrices(const gguf::GgufFile& file, const std::string& name,
                                          int64_t k, int64_t n, int64_t n_expert);

// Rows [r0, r0 + n) of `w`, a view from GetMatrix (whose row_bytes is set), as a matrix of their
// own (the parts of a fused tensor: attn_qkv's q, k and v, phi3's ffn_up's gate and up). The
// caller keeps r0 + n <= w.n.
ops::WeightView RowsOf(const ops::WeightView& w, int64_t r0, int64_t n);

// A patch-embedding convolution kernel `name` of ggml shape [p, p, 3, d] viewed as d rows of
// 3 * p * p values ordered (channel, ky, kx) (the order of an unfolded patch). Same errors as
// GetMatrix.
Result<ops::WeightView> GetPatchKernel(const gguf::GgufFile& file, const std::string& name,
                                       int64_t p, int64_t d);

// Releases the file pages of w's GGUF rows (GgufFile::ReleasePages) when w has a packed copy
// that MatMul reads instead; returns the bytes released. Call only for matrices used through
// MatMul alone (not a tied embedding table).
uint64_t ReleasePackedRows(const gguf::GgufFile& file, const ops::WeightView& w);
// The same for rows that a fused packed matrix replaced (the parts of PackFusedWeights).
uint64_t ReleaseRows(const gguf::GgufFile& file, const ops::WeightView& w);

// UNIMPLEMENTED when `file` holds tensors that its model's loader never looked up (after the
// whole load): a variant vlmd does not run (an extra bias, norm or projection it would silently
// skip). The error names them (`what`: "text model", "vision model"), as llama.cpp refuses such
// a file.
Status RefuseUnusedTensors(const gguf::GgufFile& file, std::string_view what);
// Marks the tensors whose names start with `prefix` as read: for the ones a loader skips on
// purpose, as llama.cpp does (LLaVA's blocks past the feature layer, `v.image_newline`).
void SkipTensors(const gguf::GgufFile& file, std::string_view prefix);

// Dequantizes row `row` of a weight matrix into out[0 .. w.k) (embedding lookups).
Status DequantizeMatrixRow(const ops::WeightView& w, int64_t row, float* out);

}  // namespace vlmd::engine::models
