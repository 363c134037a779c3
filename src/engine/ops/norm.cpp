// RMSNorm / LayerNorm ops: validate once, then one kernel call per row, rows split over threads.
#include "engine/ops/norm.h"

#include <string>
#include <vector>

#include "engine/ops/parallel.h"

namespace vlmd::engine::ops {
namespace {

Status ValidateNorm(const char* op, const float* x, const void* y, int64_t n_rows, int64_t n,
                    float eps) {
  if (x == nullptr || y == nullptr) return InvalidArgumentError(std::string(op) + ": null x or y");
  if (n < 1 || n_rows < 0) {
    return InvalidArgumentError(std::string(op) + ": bad shape [" + std::to_string(n_rows) + ", " +
                                std::to_string(n) + "]");
  }
  if (!(eps >= 0.0f)) return InvalidArgumentError(std::string(op) + ": eps must be >= 0");
  return Status::Ok();
}

}  // namespace

Status RmsNorm(const kernels::KernelTable& kt, ThreadPool* pool, const float* x, const float* w,
               float* y, int64_t n_rows, int64_t n, float eps) {
  VLMD_RETURN_IF_ERROR(ValidateNorm("RmsNorm", x, y, n_rows, n, eps));
  internal::ForRanges(pool, n_rows, n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kt.rms_norm(x + r * n, w, y + r * n, n, eps);
  });
  return Status::Ok();
}

Status LayerNorm(const kernels::KernelTable& kt, ThreadPool* pool, const float* x, const float* w,
                 const float* b, float* y, int64_t n_rows, int64_t n, float eps) {
  VLMD_RETURN_IF_ERROR(ValidateNorm("LayerNorm", x, y, n_rows, n, eps));
  internal::ForRanges(pool, n_rows, n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kt.layer_norm(x + r * n, w, b, y + r * n, n, eps);
  });
  return Status::Ok();
}

Status LayerNormToBf16(const kernels::KernelTable& kt, ThreadPool* pool, const float* x,
                       const float* w, const float* b, uint16_t* y16, int64_t ldy, int64_t n_rows,
                       int64_t n, float eps) {
  VLMD_RETURN_IF_ERROR(ValidateNorm("LayerNormToBf16", x, y16, n_rows, n, eps));
  if (ldy < n) return InvalidArgumentError("LayerNormToBf16: ldy < n");
  if (kt.to_bf16 == nullptr) return UnimplementedError("LayerNormToBf16: no bf16 conversion");
  internal::ForRanges(pool, n_rows, n, 1, [&](int64_t r0, int64_t r1) {
    // One f32 row between the norm and the rounding: on the stack for the usual widths (an
    // encoder tile ran ~200 ranges, each allocating one).
    constexpr int64_t kStackFloats = 4096;
    float stack_row[kStackFloats];
    std::vector<float> heap_row(n > kStackFloats ? static_cast<size_t>(n) : 0);
    float* row = n > kStackFloats ? heap_row.data() : stack_row;
    for (int64_t r = r0; r < r1; ++r) {
      kt.layer_norm(x + r * n, w, b, row, n, eps);
      kt.to_bf16(row, y16 + r * ldy, n);
    }
  });
  return Status::Ok();
}

}  // namespace vlmd::engine::ops
