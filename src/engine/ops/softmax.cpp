// Softmax op: the kernel works in place, so a non-aliased output is first filled with the input.
#include "engine/ops/softmax.h"

#include <cstring>
#include <string>

#include "engine/ops/parallel.h"

namespace vlmd::engine::ops {

Status Softmax(const kernels::KernelTable& kt, ThreadPool* pool, const float* x, float* y,
               int64_t n_rows, int64_t n) {
  if (x == nullptr || y == nullptr) return InvalidArgumentError("Softmax: null x or y");
  if (n < 1 || n_rows < 0) {
    return InvalidArgumentError("Softmax: bad shape [" + std::to_string(n_rows) + ", " +
                                std::to_string(n) + "]");
  }
  internal::ForRanges(pool, n_rows, n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = y + r * n;
      if (row != x + r * n) std::memmove(row, x + r * n, static_cast<size_t>(n) * sizeof(float));
      kt.softmax(row, n);
    }
  });
  return Status::Ok();
}

}  // namespace vlmd::engine::ops
