// Activation ops: flat buffers split into cache-line-aligned ranges over the pool.
#include "engine/ops/activation.h"

#include <algorithm>
#include <string>

#include "engine/ops/parallel.h"

namespace vlmd::engine::ops {
namespace {

// Ranges are multiples of 16 floats (64 bytes), so two threads never write one cache line.
constexpr int64_t kAlign = 16;

kernels::UnaryFn Kernel(const kernels::KernelTable& kt, Activation act) {
  switch (act) {
    case Activation::kGeluTanh: return kt.gelu_tanh;
    case Activation::kGeluErf: return kt.gelu_erf;
    case Activation::kGeluQuick: return kt.gelu_quick;
    case Activation::kSilu: return kt.silu;
  }
  return nullptr;
}

}  // namespace

kernels::UnaryFn ActivationKernel(const kernels::KernelTable& kt, Activation act) {
  return Kernel(kt, act);
}

std::string_view ActivationName(Activation act) {
  switch (act) {
    case Activation::kGeluTanh: return "gelu";
    case Activation::kGeluErf: return "gelu_erf";
    case Activation::kGeluQuick: return "gelu_quick";
    case Activation::kSilu: return "silu";
  }
  return "unknown";
}

std::optional<Activation> ParseActivation(std::string_view name) {
  for (Activation a : {Activation::kGeluTanh, Activation::kGeluErf, Activation::kGeluQuick,
                       Activation::kSilu}) {
    if (ActivationName(a) == name) return a;
  }
  return std::nullopt;
}

Status Activate(const kernels::KernelTable& kt, ThreadPool* pool, Activation act, const float* x,
                float* y, int64_t n) {
  if (n < 0) return InvalidArgumentError("Activate: n = " + std::to_string(n) + " < 0");
  if (n > 0 && (x == nullptr || y == nullptr)) return InvalidArgumentError("Activate: null buffer");
  const kernels::UnaryFn fn = Kernel(kt, act);
  if (fn == nullptr) return InvalidArgumentError("Activate: unknown activation");
  internal::ForRanges(pool, n, 1, kAlign,
                      [&](int64_t i0, int64_t i1) { fn(x + i0, y + i0, i1 - i0); });
  return Status::Ok();
}

Status SwiGlu(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate,
              const float* up, float* y, int64_t n) {
  if (n < 0) return InvalidArgumentError("SwiGlu: n = " + std::to_string(n) + " < 0");
  if (n > 0 && (gate == nullptr || up == nullptr || y == nullptr)) {
    return InvalidArgumentError("SwiGlu: null buffer");
  }
  internal::ForRanges(pool, n, 1, kAlign, [&](int64_t i0, int64_t i1) {
    kt.swiglu(gate + i0, up + i0, y + i0, i1 - i0);
  });
  return Status::Ok();
}

Status SwiGluRows(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate_up,
                  int64_t n_rows, int64_t d_ff, float* y) {
  if (n_rows < 0 || d_ff < 0) {
    return InvalidArgumentError("SwiGluRows: bad shape " + std::to_string(n_rows) + " x " +
                                std::to_string(d_ff));
  }
  if (n_rows > 0 && d_ff > 0 && (gate_up == nullptr || y == nullptr)) {
    return InvalidArgumentError("SwiGluRows: null buffer");
  }
  internal::ForRanges(pool, n_rows, d_ff, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      kt.swiglu(gate_up + r * 2 * d_ff, gate_up + r * 2 * d_ff + d_ff, y + r * d_ff, d_ff);
    }
  });
  return Status::Ok();
}

Status ActivateLikeGgml(const kernels::KernelTable& kt, ThreadPool* pool, Activation act,
                        float* x, int64_t n) {
  if (n < 0 || (n > 0 && x == nullptr)) return InvalidArgumentError("activation: bad buffer");
  // Chunks small enough for a stack copy of their inputs, spread over the pool.
  constexpr int64_t kChunk = 2048;
  const bool gelu_clamp = act == Activation::kGeluTanh;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  return internal::ForJobs(pool, chunks, [&](int64_t c, int /*worker*/) {
    float* p = x + c * kChunk;
    const int64_t len = std::min(kChunk, n - c * kChunk);
    float orig[kChunk];
    // ggml's GELU passes inputs >= 10 through unchanged and maps <= -10 to 0 (its f16 table
    // covers the rest): remember the originals to apply that after the rounded activation.
    if (gelu_clamp) std::copy_n(p, len, orig);
    kt.round_f16(p, p, len);
    Status s = Activate(kt, nullptr, act, p, p, len);
    kt.round_f16(p, p, len);
    if (gelu_clamp) {
      for (int64_t i = 0; i < len; ++i) {
        if (orig[i] <= -10.0f) p[i] = 0.0f;
        if (orig[i] >= 10.0f) p[i] = orig[i];
      }
    }
    return s;
  });
}

Status GeGlu(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate, const float* up,
             float* y, int64_t n) {
  if (n < 0 || (n > 0 && (gate == nullptr || up == nullptr || y == nullptr))) {
    return InvalidArgumentError("geglu: bad buffers");
  }
  if (y != gate) std::copy_n(gate, n, y);
  VLMD_RETURN_IF_ERROR(ActivateLikeGgml(kt, pool, Activation::kGeluTanh, y, n));
  for (int64_t i = 0; i < n; ++i) y[i] *= up[i];
  return Status::Ok();
}

Status GeGluRows(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate_up,
                 int64_t n_rows, int64_t d_ff, float* y) {
  if (n_rows < 0 || d_ff < 0 || (n_rows > 0 && (gate_up == nullptr || y == nullptr))) {
    return InvalidArgumentError("geglu rows: bad buffers");
  }
  for (int64_t r = 0; r < n_rows; ++r) std::copy_n(gate_up + r * 2 * d_ff, d_ff, y + r * d_ff);
  VLMD_RETURN_IF_ERROR(ActivateLikeGgml(kt, pool, Activation::kGeluTanh, y, n_rows * d_ff));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* up = gate_up + r * 2 * d_ff + d_ff;
    for (int64_t i = 0; i < d_ff; ++i) y[r * d_ff + i] *= up[i];
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::ops
