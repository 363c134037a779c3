// MatMul: out = A W^T for a weight matrix of any supported dtype and f32 activations. Validates
// shapes, converts the activations once into the weight type's activation format (Q8_0, Q8_K,
// F16, ...) and splits the output over the ThreadPool: by columns for decode (few rows), in 2-D
// tiles sized for L2 for prefill / encoding (many rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::ops {

// A weight matrix W [n, k] as stored in GGUF: n rows of k elements of `dtype`, row r at
// data + r * row_bytes. row_bytes == 0 means densely packed (RowBytes(dtype, k)). Not owned.
struct WeightView {
  DType dtype = DType::kF32;
  int64_t n = 0;  // output features (rows of W)
  int64_t k = 0;  // input features (reduction length)
  const void* data = nullptr;
  size_t row_bytes = 0;
};

// Caller-owned scratch for the converted activations. Grows to the largest request seen and is
// then reused, so a warmed-up decode loop does not allocate. Not thread-safe: one per caller.
class MatmulScratch {
 public:
  // A 64-byte aligned buffer of at least `bytes` bytes (contents unspecified).
  uint8_t* Reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, AlignedDelete> buf_;
  size_t capacity_ = 0;
};

// out[i, j] = sum_k W[j, k] * a[i, k] for i < m, j < w.n.
//   a   [m, w.k] f32, row i at a + i * lda (lda >= w.k, floats); not modified.
//   out [m, w.n] f32, row i at out + i * ldo (ldo >= w.n, floats); must not overlap a.
// Uses `kt` (the table of the engine's ISA; its act_type/convert_act/matmul slots). pool may be
// nullptr (single thread). scratch may be nullptr only when no conversion is needed (F32 weights).
// Numerics follow the kernel table: integer formats quantize each activation row first (as ggml).
// Errors: INVALID_ARGUMENT for m < 0, w.n < 1, w.k < 1, null pointers, lda < k, ldo < n, k not a
// multiple of the weight's block size or row_bytes smaller than a row; UNIMPLEMENTED when the
// table has no matmul for w.dtype.
Status MatMul(const kernels::KernelTable& kt, ThreadPool* pool, const WeightView& w, const float* a,
              int64_t m, int64_t lda, float* out, int64_t ldo, MatmulScratch* scratch);

}  // namespace vlmd::engine::ops
