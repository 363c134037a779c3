// CheckFinite: the shared scan (engine/tensor/finite.h) with the tensor's name in the error.
#include "engine/ops/numerics.h"

#include <string>

#include "engine/tensor/finite.h"

namespace vlmd::engine::ops {

Status CheckFinite(const float* x, int64_t n, std::string_view name) {
  const int64_t i = FindNonFinite(x, n);
  if (i < 0) return Status::Ok();
  return InternalError("non-finite value " + std::string(NonFiniteName(x[i])) + " at index " +
                       std::to_string(i) + " of " + std::to_string(n) + " in tensor '" +
                       std::string(name) + "'");
}

}  // namespace vlmd::engine::ops
