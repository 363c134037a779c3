// KernelTable: the single dispatch mechanism of the engine. One table per instruction set, filled
// once; ops/ picks the active table (best ISA of this CPU, or VLMD_FORCE_ISA) and calls through
// it. Every slot has a scalar reference twin (the kRef table) that tests compare against.
//
// Kernels never allocate, throw, log or spawn threads: ops/ validates shapes, owns scratch
// buffers and splits work over the ThreadPool; a kernel gets pointers and a sub-range.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::kernels {

enum class Isa : uint8_t { kRef = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3 };
inline constexpr int kNumIsas = 4;

std::string_view IsaName(Isa isa);               // "ref", "avx2", "avx512", "avx512vnni"
std::optional<Isa> ParseIsa(std::string_view name);
bool IsaAvailable(Isa isa);                      // this CPU (and OS) can run it
Isa BestAvailableIsa();
// The ISA the engine uses: VLMD_FORCE_ISA if set (INVALID_ARGUMENT when unknown, UNIMPLEMENTED
// when this CPU lacks it), else BestAvailableIsa().
Result<Isa> SelectIsa();

// One matmul work item: out[m * out_stride + n] = sum_k W[n, k] * A[m, k]
// W: weight rows in the weight's dtype, row n at w + n * w_row_bytes.
// A: activation rows already converted to the weight type's activation format (act_type below),
//    row m at a + m * a_row_bytes.
struct MatmulArgs {
  const uint8_t* w = nullptr;
  size_t w_row_bytes = 0;
  const uint8_t* a = nullptr;
  size_t a_row_bytes = 0;
  float* out = nullptr;
  int64_t out_stride = 0;  // floats between output rows
  int64_t k = 0;           // reduction length (a multiple of the weight's block size)
};
// Computes the output block rows [m0, m1) x columns [n0, n1).
using MatmulFn = void (*)(const MatmulArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1);
// Converts k f32 activations into a row of the activation format (e.g. Q8_0 blocks).
using ConvertRowFn = void (*)(const float* x, void* y, int64_t k);

// Row-wise elementwise kernels (one row of n floats; x and y may alias unless noted).
using RmsNormFn = void (*)(const float* x, const float* weight, float* y, int64_t n, float eps);
using LayerNormFn = void (*)(const float* x, const float* weight, const float* bias, float* y,
                             int64_t n, float eps);
using SoftmaxFn = void (*)(float* x, int64_t n);  // in place, max-subtracted
using UnaryFn = void (*)(const float* x, float* y, int64_t n);
using BinaryFn = void (*)(const float* a, const float* b, float* y, int64_t n);
// Rotates pairs of one head vector: for i < n_rot/2 the pair (x[i0], x[i1]) by angle theta_i given
// as cos_sin[2i], cos_sin[2i+1]. neox: pairs (i, i + n_rot/2); normal: pairs (2i, 2i+1).
using RopeFn = void (*)(float* x, const float* cos_sin, int64_t n_rot, bool neox);

inline constexpr int kMaxDType = 32;

struct KernelTable {
  Isa isa = Isa::kRef;
  // Matmul, indexed by the weight DType id. nullptr: this weight type has no matmul.
  std::array<MatmulFn, kMaxDType> matmul{};
  // Activation format the matmul of each weight type expects (e.g. Q4_0 -> Q8_0, Q4_K -> Q8_K).
  std::array<DType, kMaxDType> act_type{};
  // f32 -> activation format, indexed by the activation DType id.
  std::array<ConvertRowFn, kMaxDType> convert_act{};

  RmsNormFn rms_norm = nullptr;
  LayerNormFn layer_norm = nullptr;
  SoftmaxFn softmax = nullptr;
  UnaryFn gelu_tanh = nullptr;
  UnaryFn gelu_erf = nullptr;
  UnaryFn gelu_quick = nullptr;  // x * sigmoid(1.702 x) (CLIP)
  UnaryFn silu = nullptr;
  BinaryFn swiglu = nullptr;     // y = silu(a) * b
  RopeFn rope = nullptr;
};

// The table for `isa` (built on first use). The caller must ensure IsaAvailable(isa) before
// calling any kernel in it.
const KernelTable& GetKernelTable(Isa isa);

// Fillers, one per translation unit; each overwrites the slots it implements. The ref filler
// runs first for every table so that an ISA without a specialised kernel falls back to ref.
void FillRefKernels(KernelTable* t);
void FillAvx2Kernels(KernelTable* t);
void FillAvx512Kernels(KernelTable* t);
void FillAvx512VnniKernels(KernelTable* t);
void FillHwyKernels(KernelTable* t);  // Highway elementwise kernels for t->isa

}  // namespace vlmd::engine::kernels
