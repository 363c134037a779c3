// Elementwise activations (GELU variants, SiLU) and the gated SwiGLU over flat f32 buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::ops {

enum class Activation : uint8_t {
  kGeluTanh,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): ggml's default "gelu"
  kGeluErf,    // 0.5 x (1 + erf(x / sqrt 2)): exact GELU (ggml "gelu_erf")
  kGeluQuick,  // x sigmoid(1.702 x) (CLIP "quick_gelu")
  kSilu,       // x sigmoid(x)
};

std::string_view ActivationName(Activation act);  // "gelu", "gelu_erf", "gelu_quick", "silu"
std::optional<Activation> ParseActivation(std::string_view name);
// The table's kernel for `act` (for MatmulEpilogue), nullptr when the table lacks it.
kernels::UnaryFn ActivationKernel(const kernels::KernelTable& kt, Activation act);

// y[i] = act(x[i]) for i < n. y may be x (in place) but must not otherwise overlap it. pool may
// be nullptr; large n is split over its threads. INVALID_ARGUMENT on n < 0 or null buffers
// (n == 0 is a no-op).
Status Activate(const kernels::KernelTable& kt, ThreadPool* pool, Activation act, const float* x,
                float* y, int64_t n);

// y[i] = silu(gate[i]) * up[i] for i < n (LLaMA-style gated FFN). y may be gate or up.
// Same contract as Activate.
Status SwiGlu(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate,
              const float* up, float* y, int64_t n);

// The same over rows of a fused [gate | up] projection: for each of n_rows rows,
// y[r, i] = silu(gate_up[r, i]) * gate_up[r, d_ff + i], i < d_ff. y must not overlap gate_up.
Status SwiGluRows(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate_up,
                  int64_t n_rows, int64_t d_ff, float* y);

// GELU-gated FFN (Gemma's GeGLU) as ggml_vec_geglu_f32 computes it: y[i] = g(gate[i]) * up[i]
// with g ActivateLikeGgml's GELU (16-bit table, |x| >= 10 clamped). y may be gate.
Status GeGlu(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate, const float* up,
             float* y, int64_t n);
// The same over rows of a fused [gate | up] projection (see SwiGluRows). y must not overlap
// gate_up.
Status GeGluRows(const kernels::KernelTable& kt, ThreadPool* pool, const float* gate_up,
                 int64_t n_rows, int64_t d_ff, float* y);

// x[i] = act(x[i]) as ggml's CPU backend computes it (parity with llama.cpp): through 16-bit
// lookup tables, y = f16(act(f16(x))), and for GELU only for |x| < 10 (beyond, 0 or x).
// Same contract as Activate, in place.
Status ActivateLikeGgml(const kernels::KernelTable& kt, ThreadPool* pool, Activation act,
                        float* x, int64_t n);

}  // namespace vlmd::engine::ops
