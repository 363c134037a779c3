// Scalar reference matmuls: one vec-dot (vec_dot_ref.h) per output element, for every weight
// type vlmd computes with, plus the activation format each expects (ggml's vec_dot_type) and the
// f32 -> activation converters (engine/tensor/quantize.h).
#include "engine/kernels/kernel_table.h"
#include "engine/kernels/ref/ref_fill.h"
#include "engine/kernels/ref/vec_dot_ref.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine::kernels {
namespace {

// out[m, n] = dot(W row n, A row m) over the sub-range. Rows are reinterpreted as arrays of their
// block type; GGUF data and row sizes keep them aligned to the block's alignment (<= 4 bytes).
template <typename WRow, typename ARow, float (*Dot)(int64_t, const WRow*, const ARow*)>
void MatmulRef(const MatmulArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  for (int64_t m = m0; m < m1; ++m) {
    const ARow* act = reinterpret_cast<const ARow*>(args.a + m * args.a_row_bytes);
    float* out = args.out + m * args.out_stride;
    for (int64_t n = n0; n < n1; ++n) {
      out[n] = Dot(args.k, reinterpret_cast<const WRow*>(args.w + n * args.w_row_bytes), act);
    }
  }
}

void Register(KernelTable* t, DType weight, DType act, MatmulFn fn) {
  t->matmul[static_cast<size_t>(weight)] = fn;
  t->act_type[static_cast<size_t>(weight)] = act;
  t->convert_act[static_cast<size_t>(act)] = FindActivationQuantizeFn(act);
}

}  // namespace

void FillRefMatmulKernels(KernelTable* t) {
  using namespace ref;  // NOLINT(build/namespaces): the vec-dots
  Register(t, DType::kF32, DType::kF32, MatmulRef<float, float, VecDotF32>);
  Register(t, DType::kF16, DType::kF16, MatmulRef<uint16_t, uint16_t, VecDotF16>);
  Register(t, DType::kBF16, DType::kBF16, MatmulRef<uint16_t, uint16_t, VecDotBF16>);
  Register(t, DType::kQ4_0, DType::kQ8_0, MatmulRef<BlockQ4_0, BlockQ8_0, VecDotQ4_0Q8_0>);
  Register(t, DType::kQ4_1, DType::kQ8_1, MatmulRef<BlockQ4_1, BlockQ8_1, VecDotQ4_1Q8_1>);
  Register(t, DType::kQ5_0, DType::kQ8_0, MatmulRef<BlockQ5_0, BlockQ8_0, VecDotQ5_0Q8_0>);
  Register(t, DType::kQ8_0, DType::kQ8_0, MatmulRef<BlockQ8_0, BlockQ8_0, VecDotQ8_0Q8_0>);
  Register(t, DType::kQ4_K, DType::kQ8_K, MatmulRef<BlockQ4_K, BlockQ8_K, VecDotQ4_KQ8_K>);
  Register(t, DType::kQ5_K, DType::kQ8_K, MatmulRef<BlockQ5_K, BlockQ8_K, VecDotQ5_KQ8_K>);
  Register(t, DType::kQ6_K, DType::kQ8_K, MatmulRef<BlockQ6_K, BlockQ8_K, VecDotQ6_KQ8_K>);
  // Formats with no SIMD kernel: this scalar dot is their `exact` path on every table; `fast`
  // packs them into int8 blocks at load (ops::PackWeight), and so does `exact` for IQ4_NL,
  // whose levels are bytes (an exact repack).
  Register(t, DType::kQ5_1, DType::kQ8_1, MatmulRef<BlockQ5_1, BlockQ8_1, VecDotQ5_1Q8_1>);
  Register(t, DType::kIQ4_NL, DType::kQ8_0, MatmulRef<BlockIQ4_NL, BlockQ8_0, VecDotIQ4_NLQ8_0>);
  Register(t, DType::kQ2_K, DType::kQ8_K, MatmulRef<BlockQ2_K, BlockQ8_K, VecDotQ2_KQ8_K>);
  Register(t, DType::kQ3_K, DType::kQ8_K, MatmulRef<BlockQ3_K, BlockQ8_K, VecDotQ3_KQ8_K>);
  Register(t, DType::kIQ4_XS, DType::kQ8_K, MatmulRef<BlockIQ4_XS, BlockQ8_K, VecDotIQ4_XSQ8_K>);
}

}  // namespace vlmd::engine::kernels
