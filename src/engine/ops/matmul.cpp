// MatMul driver: validation, activation conversion and the thread split (see matmul.h).
#include "engine/ops/matmul.h"

#include <algorithm>
#include <new>
#include <string>

#include "engine/ops/parallel.h"

namespace vlmd::engine::ops {
namespace {

// Up to this many activation rows the matmul is weight-bandwidth bound (decode): every thread
// streams a disjoint slice of weight rows once, and the kernels use their decode-shaped tiles.
constexpr int64_t kGemvMaxRows = 4;
// Column ranges handed to threads are multiples of this (a multiple of every kernel's tile width,
// so only the last range has an edge tile).
constexpr int64_t kColumnAlign = 16;

// GEMM tile of one task (rows x columns). Float weights run the packed kernel, which transposes a
// weight block once per call: many rows per call amortize that; 128 columns = its packed panel.
// Integer weights re-read their rows per tile from L1/L2: 64 x 64 keeps the activation block
// (64 rows x k) and the weight rows in L2 for k up to ~8192 in Q8 formats.
void GemmBlock(DType w, int64_t* mb, int64_t* nb) {
  const bool is_float = w == DType::kF32 || w == DType::kF16 || w == DType::kBF16;
  *mb = is_float ? 256 : 64;
  *nb = is_float ? 128 : 64;
}

constexpr size_t kScratchAlign = 64;

size_t RoundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

void MatmulScratch::AlignedDelete::operator()(uint8_t* p) const {
  ::operator delete[](p, std::align_val_t(kScratchAlign));
}

uint8_t* MatmulScratch::Reserve(size_t bytes) {
  if (bytes > capacity_ || !buf_) {
    const size_t cap = RoundUp(std::max<size_t>(bytes, 1), kScratchAlign);
    buf_.reset(static_cast<uint8_t*>(::operator new[](cap, std::align_val_t(kScratchAlign))));
    capacity_ = cap;
  }
  return buf_.get();
}

Status MatMul(const kernels::KernelTable& kt, ThreadPool* pool, const WeightView& w, const float* a,
              int64_t m, int64_t lda, float* out, int64_t ldo, MatmulScratch* scratch) {
  if (m < 0 || w.n < 1 || w.k < 1) {
    return InvalidArgumentError("MatMul: bad shape m=" + std::to_string(m) + " n=" +
                                std::to_string(w.n) + " k=" + std::to_string(w.k));
  }
  if (m == 0) return Status::Ok();
  if (a == nullptr || out == nullptr || w.data == nullptr) {
    return InvalidArgumentError("MatMul: null weight, activation or output pointer");
  }
  if (lda < w.k || ldo < w.n) {
    return InvalidArgumentError("MatMul: lda " + std::to_string(lda) + " < k or ldo " +
                                std::to_string(ldo) + " < n");
  }
  const int wid = static_cast<int>(w.dtype);
  if (wid < 0 || wid >= kernels::kMaxDType || kt.matmul[wid] == nullptr) {
    return UnimplementedError("MatMul: no matmul kernel for weight type " +
                              std::string(DTypeName(w.dtype)));
  }
  const auto row_bytes = RowBytes(w.dtype, w.k);
  if (!row_bytes) {
    return InvalidArgumentError("MatMul: k=" + std::to_string(w.k) +
                                " is not a multiple of the block size of " +
                                std::string(DTypeName(w.dtype)));
  }
  const size_t w_row_bytes = w.row_bytes != 0 ? w.row_bytes : static_cast<size_t>(*row_bytes);
  if (w_row_bytes < *row_bytes) {
    return InvalidArgumentError("MatMul: weight row_bytes " + std::to_string(w.row_bytes) +
                                " < " + std::to_string(*row_bytes));
  }
  const kernels::MatmulFn fn = kt.matmul[wid];
  const DType act = kt.act_type[wid];

  kernels::MatmulArgs args;
  args.w = static_cast<const uint8_t*>(w.data);
  args.w_row_bytes = w_row_bytes;
  args.out = out;
  args.out_stride = ldo;
  args.k = w.k;

  if (act == DType::kF32) {
    args.a = reinterpret_cast<const uint8_t*>(a);
    args.a_row_bytes = static_cast<size_t>(lda) * sizeof(float);
  } else {
    const auto act_bytes = RowBytes(act, w.k);
    const kernels::ConvertRowFn convert = kt.convert_act[static_cast<int>(act)];
    if (!act_bytes || convert == nullptr) {
      return UnimplementedError("MatMul: no activation conversion to " +
                                std::string(DTypeName(act)) + " for k=" + std::to_string(w.k));
    }
    if (scratch == nullptr) {
      return InvalidArgumentError("MatMul: a scratch buffer is required for " +
                                  std::string(DTypeName(w.dtype)) + " weights");
    }
    // Rows start on cache lines: the kernels load whole activation blocks.
    const size_t stride = RoundUp(static_cast<size_t>(*act_bytes), kScratchAlign);
    uint8_t* buf = scratch->Reserve(stride * static_cast<size_t>(m));
    internal::ForRanges(pool, m, w.k, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) convert(a + r * lda, buf + r * stride, w.k);
    });
    args.a = buf;
    args.a_row_bytes = stride;
  }

  if (m <= kGemvMaxRows) {
    internal::ForRanges(pool, w.n, m * w.k, kColumnAlign, [&](int64_t begin, int64_t end) {
      fn(args, 0, m, begin, end);
    });
    return Status::Ok();
  }

  int64_t mb, nb;
  GemmBlock(w.dtype, &mb, &nb);
  const int64_t n_mt = (m + mb - 1) / mb, n_nt = (w.n + nb - 1) / nb;
  auto run_tile = [&](int64_t t) {
    const int64_t mt = t % n_mt, nt = t / n_mt;
    const int64_t m0 = mt * mb, n0 = nt * nb;
    fn(args, m0, std::min(m, m0 + mb), n0, std::min(w.n, n0 + nb));
  };
  if (pool == nullptr || pool->size() == 1 || n_mt * n_nt == 1) {
    for (int64_t t = 0; t < n_mt * n_nt; ++t) run_tile(t);
  } else {
    pool->ParallelFor(n_mt * n_nt, [&](int64_t t, int /*thread*/) { run_tile(t); });
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::ops
