// Row softmax over [n_rows, n] f32 values.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::ops {

// y[r] = softmax(x[r]) for each row of x [n_rows, n], max-subtracted so that any finite input is
// safe; -inf entries get probability 0 and a row of only -inf becomes all zeros. y may be x
// (in place) but must not otherwise overlap it.
// pool may be nullptr. INVALID_ARGUMENT on n < 1, n_rows < 0 or a null x / y.
Status Softmax(const kernels::KernelTable& kt, ThreadPool* pool, const float* x, float* y,
               int64_t n_rows, int64_t n);

}  // namespace vlmd::engine::ops
