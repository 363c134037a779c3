// Row normalizations (RMSNorm, LayerNorm) over [n_rows, n] f32 activations.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::ops {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for each row r of x [n_rows, n] (row-major).
// w [n] may be nullptr (no scale). y [n_rows, n] may be x (in place) but must not otherwise
// overlap it. pool may be nullptr (single
// thread). The caller keeps ownership of every buffer. INVALID_ARGUMENT on n < 1, n_rows < 0,
// eps < 0 or a null x / y.
Status RmsNorm(const kernels::KernelTable& kt, ThreadPool* pool, const float* x, const float* w,
               float* y, int64_t n_rows, int64_t n, float eps);

// y[r] = (x[r] - mean) / sqrt(var + eps) * w + b (biased variance, as PyTorch and ggml).
// w and b [n] may each be nullptr. Same contract as RmsNorm.
Status LayerNorm(const kernels::KernelTable& kt, ThreadPool* pool, const float* x, const float* w,
                 const float* b, float* y, int64_t n_rows, int64_t n, float eps);

// LayerNorm with bf16 output (round to nearest even) for the tile matmul's activation rows: row r
// at y16 + r * ldy (ldy >= n). Each row is normalized in f32 and converted while it is in L1.
// Same contract as LayerNorm; UNIMPLEMENTED when the table has no to_bf16.
Status LayerNormToBf16(const kernels::KernelTable& kt, ThreadPool* pool, const float* x,
                       const float* w, const float* b, uint16_t* y16, int64_t ldy, int64_t n_rows,
                       int64_t n, float eps);

}  // namespace vlmd::engine::ops
