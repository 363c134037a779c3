// MatMul: out = A W^T for a weight matrix of any supported dtype and f32 activations. Validates
// shapes, converts the activations once into the weight type's activation format (Q8_0, Q8_K,
// F16, ...) and splits the output over the ThreadPool: by columns for decode (few rows), in 2-D
// tiles sized for L2 for prefill / encoding (many rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/tensor/dtype.h"

// Declared only: the packed layouts' headers (kernels/packed_int8.h, kernels/tile_bf16.h) change
// with the kernels, and every model and server file includes this one. Who reads a packed
// matrix's members includes them itself.
namespace vlmd::engine::kernels {
class PackedMatrix;
class TileBf16Matrix;
struct TileBf16Args;
}  // namespace vlmd::engine::kernels

namespace vlmd::engine::ops {

// When a product over a packed matrix (WeightView::packed) runs on the AMX tile unit instead of
// the int8 kernel: its weights and activations are then rounded to bf16 (fast precision only).
//   kNever:    the int8 kernel (exact precision, or a caller that needs the int8 numbers).
//   kManyRows: from ~32 rows, where the tiles are faster (PackWeight's choice in fast precision).
//   kAlways:   every row count, so that a row's result does not depend on how many rows share the
//              call (TextDecoder's prompt rows, however a prompt is cut into chunks).
// Without the tile kernel in the table it is always the int8 kernel.
enum class PackedTileRoute : uint8_t { kNever, kManyRows, kAlways };

// A weight matrix W [n, k] as stored in GGUF: n rows of k elements of `dtype`, row r at
// data + r * row_bytes. row_bytes == 0 means densely packed (RowBytes(dtype, k)). Not owned.
// `packed`, when set, is the same matrix repacked for the packed int8 matmul (PackWeight); MatMul
// uses it when the kernel table has that kernel, else the GGUF rows. A fused view
// (PackFusedWeights) has only `packed` (data == nullptr) and needs the packed kernel. `tiles`,
// when set, is the matrix as bf16 tiles (fast precision on AMX); MatMul prefers it.
struct WeightView {
  DType dtype = DType::kF32;
  int64_t n = 0;  // output features (rows of W)
  int64_t k = 0;  // input features (reduction length)
  const void* data = nullptr;
  size_t row_bytes = 0;
  const kernels::PackedMatrix* packed = nullptr;
  const kernels::TileBf16Matrix* tiles = nullptr;
  // Set to kManyRows by PackWeight / PackFusedWeights in fast precision where the CPU has the
  // tile unit; a caller may narrow or widen it per call on a copy of the view.
  PackedTileRoute packed_tile_route = PackedTileRoute::kNever;
  // The GGUF tensor it comes from (a view into the file's header, which outlives the weights),
  // for load-time errors; empty when unknown.
  std::string_view name = {};
};

// The decoders' rule for a product over packed weights: prompt rows on the tile unit at any row
// count (kAlways), so that a row's numbers do not depend on the rows beside it; other rows
// (decode steps) never. A view that may not use the tiles (kNever) stays as it is.
WeightView RouteForRows(const WeightView& w, bool prompt_rows);

// How far the engine may round beyond the GGUF weights and the reference implementation.
//   kExact: f32 accumulation; activations quantized only where the reference does it too (Q8_0
//           blocks against integer weights). What the parity tests run.
//   kFast:  F32/F16/BF16 weight matrices are also quantized to int8 blocks (Q8_0 rule) and run
//           on the packed int8 matmul, several times the f32 FMA rate; or, where the loader asks
//           for bf16 tiles and the CPU has AMX, rounded to bf16 for the tile unit (many times
//           more). On AMX, products of many rows over packed matrices may also run on the tile
//           unit with bf16 weights and activations (PackedTileRoute). The tools' default.
enum class Precision : uint8_t { kExact = 0, kFast = 1 };
std::string_view PrecisionName(Precision p);  // "exact" | "fast"
std::optional<Precision> ParsePrecision(std::string_view name);

// Weight packing at model load: the kernel table decides whether packing is used at all (nullptr
// or a table without packed_matmul: never), the precision which weight types are packed.
// bf16_tiles: in kFast, F32/F16/BF16/Q8_0 matrices become bf16 tiles instead of int8 panels when
// the table has the tile kernel. Worth it for compute-bound users (the vision encoder: hundreds of
// rows per matmul); a decoder streaming weights once per token reads half the bytes as int8.
//
// A cap on the memory a model's packed copies may take while it loads (the server's memory budget
// less what it holds; SPEC S9): each matrix is charged the most its layout can take before it is
// packed, then what it took. A load that would pass the cap stops with RESOURCE_EXHAUSTED before
// it writes the pages, where the budget's check after the load came too late (a Q2_K or Q3_K
// file packs to 2.5-3.3x its size in kFast). One load's loaders pack one matrix at a time: not
// thread-safe.
class PackedBytesCap {
 public:
  // `hint`: where the cap comes from and how to raise it, for the refusal's message.
  explicit PackedBytesCap(uint64_t cap, std::string hint = {}) : cap_(cap), hint_(std::move(hint)) {}
  // Charges `bytes` for the matrix `name`; RESOURCE_EXHAUSTED (nothing charged) past the cap.
  Status Charge(uint64_t bytes, std::string_view name);
  // RESOURCE_EXHAUSTED when what the load holds besides (CountHeld) passes the cap alone.
  Status CheckHeld() const;
  // Counts `held()` (asked at each charge) beside the packed copies: the memory a load holds
  // otherwise, e.g. a sealed model's decrypted files less the pages the loaders gave back.
  void CountHeld(std::function<uint64_t()> held) { held_ = std::move(held); }
  // Gives back what a charge over-estimated.
  void Refund(uint64_t bytes) { charged_ -= bytes < charged_ ? bytes : charged_; }
  uint64_t charged() const { return charged_; }

 private:
  uint64_t cap_;
  std::string hint_;
  std::function<uint64_t()> held_;
  uint64_t charged_ = 0;
};

struct WeightPacking {
  const kernels::KernelTable* kt = nullptr;
  Precision precision = Precision::kExact;
  bool bf16_tiles = false;
  ThreadPool* pool = nullptr;  // packs each int8 matrix's panel groups in parallel (load time)
  PackedBytesCap* cap = nullptr;  // nullptr: no cap
};
// Owner of a model's packed matrices (the views point into it). Its special members are defined
// in matmul.cpp, where the packed types are complete.
struct PackedStore {
  PackedStore();
  ~PackedStore();
  PackedStore(PackedStore&&) noexcept;
  PackedStore& operator=(PackedStore&&) noexcept;

  std::vector<std::unique_ptr<kernels::PackedMatrix>> int8;
  std::vector<std::unique_ptr<kernels::TileBf16Matrix>> bf16;
  size_t size() const { return int8.size() + bf16.size(); }
};
// Bytes held by the packed matrices of a store.
uint64_t PackedBytes(const PackedStore& store);

// How a model's matrices were packed, for the load log and `vlmd-run --json`: above all which
// share of the float weights (F32/F16/BF16) took one int8 scale per column and which kept Q8_0
// blocks because a column failed the error test (packed_int8.h, kColumnScaleErrorRatio).
struct PackingSummary {
  int float_column_scaled = 0;  // float rows as kQ8Col
  int float_q8_blocks = 0;      // float rows as kQ8 (a column failed the test)
  int quant_int8 = 0;           // quantized rows (Q8_0, Q5_0, Q5_K, Q6_K; fused with float ones)
                                // as int8 blocks
  int quant_4bit = 0;           // Q4_0 / Q4_K rows as nibbles
  int bf16_tiles = 0;           // tiles for the AMX unit
  uint64_t bytes = 0;
  int matrices() const {
    return float_column_scaled + float_q8_blocks + quant_int8 + quant_4bit + bf16_tiles;
  }
  PackingSummary& operator+=(const PackingSummary& o);
  // e.g. "40 matrices, 12.5 MiB: float 36 column-scaled + 2 Q8_0-block, 2 4-bit"; "none".
  std::string ToString() const;
};
PackingSummary SummarizePacking(const PackedStore& store);

// Packs *w when `packing` allows it for w->dtype (Q8_0 / Q5_0 / Q4_0 always; F32 / F16 / BF16 /
// Q4_K in kFast; the block types' k a multiple of their block, float rows any k), appends the
// packed matrix to *store and points w->packed (or w->tiles, see WeightPacking::bf16_tiles) at
// it. Otherwise leaves *w as it is. Errors: the allocation or a
// conversion failed.
Status PackWeight(const WeightPacking& packing, WeightView* w, PackedStore* store);

// Packs the matrices `parts` (same k, consecutive output features) into one packed matrix when
// PackWeight would pack every one of them and their formats agree (all Q4_0 or none), so that one
// MatMul computes all their outputs side by side: out row = [part 0 | part 1 | ...]. Returns the
// fused view (data == nullptr, packed set), or a view with packed == nullptr when fusing does not
// apply; the parts themselves are left unpacked. Errors: the allocation or a conversion failed.
Result<WeightView> PackFusedWeights(const WeightPacking& packing,
                                    std::span<const WeightView* const> parts, PackedStore* store);

// Caller-owned scratch for the converted activations. Grows to the largest request seen and is
// then reused, so a warmed-up decode loop does not allocate. Not thread-safe: one per caller.
class MatmulScratch {
 public:
  // A 64-byte aligned buffer of at least `bytes` bytes (contents unspecified).
  uint8_t* Reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, AlignedDelete> buf_;
  size_t capacity_ = 0;
};

// Applied to every output after the product, while the output block is still in cache:
// out[i, j] = act(out[i, j] + bias[j]) + residual[i, j]. Any part may be absent.
struct MatmulEpilogue {
  const float* bias = nullptr;     // [w.n] or nullptr
  kernels::UnaryFn act = nullptr;  // e.g. ActivationKernel(kt, ...); nullptr: none
  // [m, w.n], row i at residual + i * ld_residual (ld_residual >= w.n); must not overlap out.
  // A residual stream x += W a is out = W a + x into a second buffer, then the buffers swap.
  const float* residual = nullptr;
  int64_t ld_residual = 0;
};

// out[i, j] = sum_k W[j, k] * a[i, k] for i < m, j < w.n (then the epilogue, if given).
//   a   [m, w.k] f32, row i at a + i * lda (lda >= w.k, floats); not modified.
//   out [m, w.n] f32, row i at out + i * ldo (ldo >= w.n, floats); must not overlap a.
// Uses `kt` (the table of the engine's ISA; its act_type/convert_act/matmul slots). pool may be
// nullptr (single thread). scratch may be nullptr only when no conversion is needed (F32 weights).
// Numerics follow the kernel table: integer formats quantize each activation row first (as ggml).
// Errors: INVALID_ARGUMENT for m < 0, w.n < 1, w.k < 1, null pointers, lda < k, ldo < n, k not a
// multiple of the weight's block size or row_bytes smaller than a row; UNIMPLEMENTED when the
// table has no matmul for w.dtype.
Status MatMul(const kernels::KernelTable& kt, ThreadPool* pool, const WeightView& w, const float* a,
              int64_t m, int64_t lda, float* out, int64_t ldo, MatmulScratch* scratch,
              const MatmulEpilogue* epilogue = nullptr);

// outs[i] = a W_i^T for several weights of the same k reading the same activations (a block's
// Q, K and V projections): the activations are converted once when every weight takes the bf16
// tile path, else this is MatMul per weight. out i has ldo = ws[i]->n; epilogues, when not
// empty, has one entry (possibly nullptr) per weight. Same errors as MatMul; INVALID_ARGUMENT
// when the spans differ in length or the weights in k.
Status MatMulShared(const kernels::KernelTable& kt, ThreadPool* pool,
                    std::span<const WeightView* const> ws, const float* a, int64_t m, int64_t lda,
                    std::span<float* const> outs, MatmulScratch* scratch,
                    std::span<const MatmulEpilogue* const> epilogues = {});

// The tile product for callers that keep their activations as bf16 rows between products (the
// vision encoder in fast precision on AMX): rows [0, m) of args.a (stride args.lda >= w.k(),
// readable up to row m rounded up to 16) times `w`, with the outputs and epilogue set in `args`
// (tile_bf16.h: f32 out, accumulated or not, or bf16 out_bf16); args.w, n and k are taken from w.
// Split over the pool in blocks of rows x panels. INVALID_ARGUMENT for null operands, m < 0,
// strides too small or accumulation into a bf16 output; UNIMPLEMENTED without the tile kernel.
Status TileMatMul(const kernels::KernelTable& kt, ThreadPool* pool,
                  const kernels::TileBf16Matrix& w, const kernels::TileBf16Args& args, int64_t m);

}  // namespace vlmd::engine::ops
