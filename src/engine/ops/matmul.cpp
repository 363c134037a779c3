// MatMul driver: validation, activation conversion and the thread split (see matmul.h).
#include "engine/ops/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <new>
#include <optional>
#include <span>
#include <string>

#include "core/byte_counts.h"
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/tile_bf16.h"
#include "engine/ops/parallel.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quant_blocks.h"

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

// Rows per GEMM task of the packed matmul, and 16-column panels per task: 64 rows of Q8_0
// activations (k = 768: 52 KB) and 4 panels of weights (k = 768: 48 KB) stay in L2.
constexpr int64_t kPackedRowBlock = 64;
constexpr int64_t kPackedPanelBlock = 6;  // two tiles of 3 panels: no narrow edge tile

// The epilogue over output rows [r0, r1) x columns [c0, c1).
void ApplyEpilogue(const MatmulEpilogue& ep, float* out, int64_t ldo, int64_t r0, int64_t r1,
                   int64_t c0, int64_t c1) {
  for (int64_t r = r0; r < r1; ++r) {
    float* row = out + r * ldo;
    if (ep.bias != nullptr) {
      for (int64_t c = c0; c < c1; ++c) row[c] += ep.bias[c];
    }
    if (ep.act != nullptr) ep.act(row + c0, row + c0, c1 - c0);
    if (ep.residual != nullptr) {
      const float* res = ep.residual + r * ep.ld_residual;
      for (int64_t c = c0; c < c1; ++c) row[c] += res[c];
    }
  }
}

// The packed int8 path: activations to Q8_0 blocks plus per-block sums, then panels over threads,
// each range or tile followed by the epilogue on its outputs. (MatMulCore has checked the shapes
// and that there is a scratch buffer, for this and PackedMatMulOnTiles.)
Status PackedMatMul(const kernels::KernelTable& kt, ThreadPool* pool, const WeightView& w,
                    const float* a, int64_t m, int64_t lda, float* out, int64_t ldo,
                    MatmulScratch* scratch, const MatmulEpilogue* epilogue) {
  const kernels::PackedMatrix& pw = *w.packed;
  const int64_t nb = pw.blocks();
  const kernels::ConvertQ8_0SumsFn convert = kt.convert_q8_0_sums;
  if (convert == nullptr) return UnimplementedError("MatMul: no Q8_0 activation conversion");
  const int64_t k_blocks = nb * kernels::kPackBlock;  // w.k rounded up to whole blocks
  const size_t stride =
      RoundUp(static_cast<size_t>(*RowBytes(DType::kQ8_0, k_blocks)), kScratchAlign);
  const size_t sums_offset = stride * static_cast<size_t>(m);
  const size_t values = static_cast<size_t>(m * nb);
  // Products of many rows also get each block's scale as f32 and its offset term
  // (PackedMatmulArgs).
  const bool gemm = m >= kernels::kGemmPrepMinRows;
  const size_t prep_bytes = gemm ? values * (sizeof(float) + sizeof(int32_t)) : 0;
  uint8_t* buf = scratch->Reserve(sums_offset + values * sizeof(int32_t) + prep_bytes);
  auto* sums = reinterpret_cast<int32_t*>(buf + sums_offset);
  auto* a_scales = gemm ? reinterpret_cast<float*>(sums + values) : nullptr;
  auto* a_offsets = gemm ? reinterpret_cast<int32_t*>(a_scales + values) : nullptr;
  const int32_t offset = pw.offset();
  // A k that is not a multiple of 32 (float weights, packed_int8.h) gets its last block
  // zero-padded by the converter, as the weights were packed.
  internal::ForRanges(pool, m, w.k, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      convert(a + r * lda, buf + r * stride, sums + r * nb, w.k);
      if (!gemm) continue;
      const auto* blocks = reinterpret_cast<const BlockQ8_0*>(buf + r * stride);
      for (int64_t b = 0; b < nb; ++b) {
        a_scales[r * nb + b] = F16ToF32(blocks[b].d);
        a_offsets[r * nb + b] = -offset * sums[r * nb + b];
      }
    }
  });
  kernels::PackedMatmulArgs args;
  args.w = &pw;
  args.a = buf;
  args.a_row_bytes = stride;
  args.a_sums = sums;
  args.a_scales = a_scales;
  args.a_offsets = a_offsets;
  args.out = out;
  args.out_stride = ldo;
  args.gemv_prefetch_blocks_q4 = kt.gemv_prefetch_blocks_q4;
  const int64_t panels = pw.panels();
  // Rows [m0, m1) x panels [p0, p1), then the epilogue on them while they are in cache.
  auto run = [&](int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
    kt.packed_matmul(args, m0, m1, p0, p1);
    if (epilogue != nullptr) {
      ApplyEpilogue(*epilogue, out, ldo, m0, m1, p0 * kernels::kPanelCols,
                    std::min(w.n, p1 * kernels::kPanelCols));
    }
  };
  if (m <= kGemvMaxRows) {
    // Panel ranges split in shrinking parts, aligned to the layout's panel groups (a range of
    // whole groups reads whole contiguous streams; single panels measured slower for kQ4). With
    // groups of 1 (kQ8) a range's last tile may be narrower than 4 panels, which costs less
    // than the imbalance of whole-tile ranges. (Quantizing the row on each thread instead of
    // once before the split measured slower: 489-505 vs 502-513 tok/s.)
    internal::ForRanges(pool, panels, m * w.k * kernels::kPanelCols, pw.group_panels(),
                        [&](int64_t begin, int64_t end) { run(0, m, begin, end); });
    return Status::Ok();
  }
  const int64_t n_mt = (m + kPackedRowBlock - 1) / kPackedRowBlock;
  const int64_t n_pt = (panels + kPackedPanelBlock - 1) / kPackedPanelBlock;
  internal::ForTasks(pool, n_mt * n_pt, [&](int64_t t, int /*worker*/) {
    const int64_t m0 = (t % n_mt) * kPackedRowBlock, p0 = (t / n_mt) * kPackedPanelBlock;
    run(m0, std::min(m, m0 + kPackedRowBlock), p0, std::min(panels, p0 + kPackedPanelBlock));
  });
  return Status::Ok();
}

// Rows per task of the tile matmul (a multiple of 32, the kernel's row block) and panels per task:
// 128 bf16 rows of k = 768 (192 KB) and 8 panels (192 KB) stay in L2.
constexpr int64_t kTileRowBlock = 128;
constexpr int64_t kTilePanelBlock = 8;

// bf16 activation rows for the tile path: k values padded with zeros to whole tile steps
// (TileBf16Matrix::PaddedK), rows padded with zeros to a multiple of 16, row stride
// kernels::TileRowStride(k_padded).
size_t TileActivationElems(int64_t m, int64_t k) {
  const int64_t padded_rows =
      (m + kernels::kTileRows - 1) / kernels::kTileRows * kernels::kTileRows;
  return static_cast<size_t>(padded_rows *
                             kernels::TileRowStride(kernels::TileBf16Matrix::PaddedK(k)));
}

// Activations (k values per row) into `buf` (TileActivationElems(m, k) values) as above.
void ConvertRowsForTiles(const kernels::KernelTable& kt, ThreadPool* pool, const float* a,
                         int64_t m, int64_t lda, int64_t k, uint16_t* buf) {
  const int64_t k_padded = kernels::TileBf16Matrix::PaddedK(k);
  const int64_t stride = kernels::TileRowStride(k_padded);
  internal::ForRanges(pool, m, k, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      kt.to_bf16(a + r * lda, buf + r * stride, k);
      std::fill(buf + r * stride + k, buf + r * stride + k_padded, uint16_t{0});
    }
  });
  std::fill(buf + m * stride, buf + TileActivationElems(m, k), uint16_t{0});
}

// The converted activations in the scratch buffer.
uint16_t* ConvertForTiles(const kernels::KernelTable& kt, ThreadPool* pool, const float* a,
                          int64_t m, int64_t lda, int64_t k, MatmulScratch* scratch) {
  auto* buf = reinterpret_cast<uint16_t*>(
      scratch->Reserve(TileActivationElems(m, k) * sizeof(uint16_t)));
  ConvertRowsForTiles(kt, pool, a, m, lda, k, buf);
  return buf;
}

// An epilogue's residual must have a wide enough stride and must not overlap the output (the
// product would be written over it before it is added).
Status CheckResidual(const MatmulEpilogue* ep, const float* out, int64_t ldo, int64_t m,
                     int64_t n, const char* op) {
  if (ep == nullptr || ep->residual == nullptr || m == 0) return Status::Ok();
  if (ep->ld_residual < n) {
    return InvalidArgumentError(std::string(op) + ": residual stride " +
                                std::to_string(ep->ld_residual) + " < n");
  }
  const auto lo = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const auto hi = [](const float* p, int64_t ld, int64_t rows, int64_t cols) {
    return reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>((rows - 1) * ld + cols) * 4;
  };
  if (lo(ep->residual) < hi(out, ldo, m, n) && lo(out) < hi(ep->residual, ep->ld_residual, m, n)) {
    return InvalidArgumentError(std::string(op) + ": the residual overlaps the output");
  }
  return Status::Ok();
}

// The residual part of `ep` alone (for the tile path, whose kernel epilogue has no residual).
void ApplyResidual(ThreadPool* pool, const MatmulEpilogue& ep, float* out, int64_t ldo, int64_t m,
                   int64_t n) {
  MatmulEpilogue residual_only;
  residual_only.residual = ep.residual;
  residual_only.ld_residual = ep.ld_residual;
  internal::ForRanges(pool, m, n, 1, [&](int64_t r0, int64_t r1) {
    ApplyEpilogue(residual_only, out, ldo, r0, r1, 0, n);
  });
}

// The tile products of one tile matrix over threads, in tasks of kTileRowBlock rows x
// kTilePanelBlock panels. `args` has everything but the weight (taken from tw).
void RunTiles(const kernels::KernelTable& kt, ThreadPool* pool, const kernels::TileBf16Matrix& tw,
              kernels::TileBf16Args args, int64_t m) {
  args.w = tw.data();
  args.n = tw.n();
  args.k = tw.k_padded();
  const int64_t panels = tw.panels();
  const int64_t n_mt = (m + kTileRowBlock - 1) / kTileRowBlock;
  const int64_t n_pt = (panels + kTilePanelBlock - 1) / kTilePanelBlock;
  internal::ForTasks(pool, n_mt * n_pt, [&](int64_t t, int /*worker*/) {
    const int64_t m0 = (t % n_mt) * kTileRowBlock, p0 = (t / n_mt) * kTilePanelBlock;
    const int64_t m1 = std::min(m, m0 + kTileRowBlock), p1 = std::min(panels, p0 + kTilePanelBlock);
    kt.tile_bf16_matmul(args, m0, m1, p0, p1);
  });
}

// Tile arguments for bf16 rows `a16` (ConvertForTiles of k values per row) and an f32 output
// with the epilogue.
kernels::TileBf16Args TileArgs(const uint16_t* a16, int64_t k, float* out, int64_t ldo,
                               const MatmulEpilogue* epilogue) {
  kernels::TileBf16Args args;
  args.a = a16;
  args.lda = kernels::TileRowStride(kernels::TileBf16Matrix::PaddedK(k));
  args.out = out;
  args.ldo = ldo;
  if (epilogue != nullptr) {
    args.bias = epilogue->bias;
    args.act = epilogue->act;
  }
  return args;
}

bool UsesTiles(const kernels::KernelTable& kt, const WeightView& w) {
  return w.tiles != nullptr && kt.tile_bf16_matmul != nullptr && kt.to_bf16 != nullptr;
}

// Packed weights on the tile unit (WeightView::packed_tile_route): kManyRows from kTiledMinRows
// rows (q4_0 prefill on 2 threads: at 16 rows the int8 kernel, which needs no conversion, was
// 13% faster; at 32 the tiles 1-15%, at 48 21%, at 64 22%), kAlways at any. A task converts a
// block of panels to bf16 tiles (~0.3 vector instructions per weight) into a per-worker buffer,
// which then stays in L2 while activation rows pass in blocks of kTiledRowBlock: all rows of the
// product, or from kTiledSplitRows rows one row block per task (a worker skips the conversion
// when its previous task had the same panels). Measured on SmolLM2-135M q4_0 prefill, 2 threads:
// tasks of 2 panels x 512 rows 2.3k tok/s at pp512, 8 x 128 2.9-3.0k, 16-28 x 64 3.1-3.4k; for
// a 128-row product (the last chunk of a longer prompt) the per-row-block tasks converted most
// panels on both workers; one task per panel block: pp128 3.05-3.2k -> 3.27-3.43k tok/s.
constexpr int64_t kTiledMinRows = 32;
constexpr int64_t kTiledRowBlock = 64;
constexpr int64_t kTiledSplitRows = 256;
constexpr size_t kTiledBlockBytes = 512 << 10;

// Panels per task: about kTiledBlockBytes of bf16 tiles (at most 32 panels), fewer when that
// would leave the threads fewer than 4 tasks each (`row_tasks` tasks per panel block), and always
// an even number: the tile kernel's full register block takes panels in pairs (a lone panel runs
// the 2 x 1 block, which reloads the activation tiles for every panel). An FFN down projection
// (k 8960-14336: one 280-450 KB panel per task before) measured 26.5-32.1 ms with pairs against
// 31.5-38.0 ms (m 512, n 1536, k 8960, q4_0, 2 threads, AMX: bench/micro gemm_packed).
int64_t TiledPanelsPerTask(int64_t k, int64_t panels, int64_t row_tasks, int workers) {
  const int64_t panel_bytes = k * kernels::kPanelCols * static_cast<int64_t>(sizeof(uint16_t));
  int64_t per_task =
      std::clamp<int64_t>(static_cast<int64_t>(kTiledBlockBytes) / panel_bytes, 2, 32) / 2 * 2;
  while (per_task > 2 && row_tasks * ((panels + per_task - 1) / per_task) < 4 * workers) {
    per_task = (per_task / 2 + 1) / 2 * 2;
  }
  return per_task;
}

bool UsesTilesForPacked(const kernels::KernelTable& kt, const WeightView& w, int64_t m) {
  const bool wanted = w.packed_tile_route == PackedTileRoute::kAlways ||
                      (w.packed_tile_route == PackedTileRoute::kManyRows && m >= kTiledMinRows);
  // packed_to_tiles writes whole blocks: a zero-padded last block would not fit the tile panel.
  return wanted && w.k % kernels::kPackBlock == 0 && kt.packed_to_tiles != nullptr &&
         kt.tile_bf16_matmul != nullptr && kt.to_bf16 != nullptr;
}

Status PackedMatMulOnTiles(const kernels::KernelTable& kt, ThreadPool* pool, const WeightView& w,
                           const float* a, int64_t m, int64_t lda, float* out, int64_t ldo,
                           MatmulScratch* scratch, const MatmulEpilogue* epilogue) {
  const kernels::PackedMatrix& pw = *w.packed;
  const int64_t k = w.k;  // a multiple of 32: no padding columns
  const int workers = pool != nullptr ? pool->size() : 1;
  const int64_t panels = pw.panels();
  const int64_t row_block_count = (m + kTiledRowBlock - 1) / kTiledRowBlock;
  const int64_t row_tasks = m >= kTiledSplitRows ? row_block_count : 1;
  const int64_t per_task = TiledPanelsPerTask(k, panels, row_tasks, workers);
  const size_t a_bytes = RoundUp(TileActivationElems(m, k) * sizeof(uint16_t), kScratchAlign);
  const size_t tile_bytes = static_cast<size_t>(per_task * k * kernels::kPanelCols) *
                            sizeof(uint16_t);
  uint8_t* buf = scratch->Reserve(a_bytes + static_cast<size_t>(workers) * tile_bytes);
  const auto* a16 = reinterpret_cast<const uint16_t*>(buf);
  ConvertRowsForTiles(kt, pool, a, m, lda, k, reinterpret_cast<uint16_t*>(buf));
  MatmulEpilogue residual_only;
  if (epilogue != nullptr) {
    residual_only.residual = epilogue->residual;
    residual_only.ld_residual = epilogue->ld_residual;
  }
  const int64_t rows_per_task = (row_block_count / row_tasks) * kTiledRowBlock;
  const int64_t panel_tasks = (panels + per_task - 1) / per_task;
  std::vector<int64_t> converted(static_cast<size_t>(workers), -1);  // panel block per worker
  internal::ForTasks(pool, panel_tasks * row_tasks, [&](int64_t t, int worker) {
    const int64_t pt = t / row_tasks, r0 = (t % row_tasks) * rows_per_task;
    const int64_t r1 = std::min(m, r0 + rows_per_task);
    const int64_t p0 = pt * per_task, p1 = std::min(panels, p0 + per_task);
    const int64_t c0 = p0 * kernels::kPanelCols, c1 = std::min(w.n, p1 * kernels::kPanelCols);
    auto* tiles =
        reinterpret_cast<uint16_t*>(buf + a_bytes + static_cast<size_t>(worker) * tile_bytes);
    if (converted[static_cast<size_t>(worker)] != pt) {
      kt.packed_to_tiles(pw, p0, p1, tiles);
      converted[static_cast<size_t>(worker)] = pt;
    }
    kernels::TileBf16Args args = TileArgs(a16, k, out + c0, ldo, epilogue);
    if (args.bias != nullptr) args.bias += c0;
    args.w = tiles;
    args.n = c1 - c0;
    args.k = k;
    for (int64_t m0 = r0; m0 < r1; m0 += kTiledRowBlock) {
      const int64_t m1 = std::min(r1, m0 + kTiledRowBlock);
      kt.tile_bf16_matmul(args, m0, m1, 0, p1 - p0);
      if (residual_only.residual != nullptr) ApplyEpilogue(residual_only, out, ldo, m0, m1, c0, c1);
    }
  });
  return Status::Ok();
}

}  // namespace

WeightView RouteForRows(const WeightView& w, bool prompt_rows) {
  WeightView v = w;
  if (v.packed_tile_route != PackedTileRoute::kNever) {
    v.packed_tile_route = prompt_rows ? PackedTileRoute::kAlways : PackedTileRoute::kNever;
  }
  return v;
}

std::string_view PrecisionName(Precision p) { return p == Precision::kFast ? "fast" : "exact"; }

std::optional<Precision> ParsePrecision(std::string_view name) {
  if (name == "exact") return Precision::kExact;
  if (name == "fast") return Precision::kFast;
  return std::nullopt;
}

namespace {
// Formats read from llama.cpp's files with no SIMD kernel of their own: `exact` runs the scalar
// reference dot (kernels/ref), `fast` their values requantized to int8 blocks.
bool HasOnlyScalarKernel(DType t) {
  return t == DType::kQ5_1 || t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kIQ4_XS;
}

// The packing source of *w when PackWeight's rules pack it, else nullopt.
std::optional<kernels::PackSource> PackableSource(const WeightPacking& packing, const WeightView& w) {
  if (packing.kt == nullptr || packing.kt->packed_matmul == nullptr) return std::nullopt;
  if (w.data == nullptr) return std::nullopt;
  // Q8_0 / Q5_0 / Q4_0 / IQ4_NL repack exactly; float types and the K-quants change numerics
  // (packed_int8.h): fast only. Q5_K and Q6_K (Q4_K_M files hold Q6_K for half the layers'
  // ffn_down and attn_v and for the output) ran their prompt rows on the GGUF-row kernel: on a
  // Qwen2.5-VL-3B Q4_K_M-like file that was a third of the prefill (bench/RESULTS.md, session 33).
  const bool exact_repack = w.dtype == DType::kQ8_0 || w.dtype == DType::kQ5_0 ||
                            w.dtype == DType::kQ4_0 || w.dtype == DType::kIQ4_NL;
  const bool float_rows =
      w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16;
  const bool fast_repack = float_rows || w.dtype == DType::kQ4_K || w.dtype == DType::kQ5_K ||
                           w.dtype == DType::kQ6_K || HasOnlyScalarKernel(w.dtype);
  if (!(exact_repack || (fast_repack && packing.precision == Precision::kFast))) {
    return std::nullopt;
  }
  // Float rows of any k pack (the last block zero-padded, packed_int8.h); block types' rows are
  // whole blocks.
  if (!float_rows && w.k % kernels::kPackBlock != 0) return std::nullopt;
  const auto row_bytes = RowBytes(w.dtype, w.k);
  if (!row_bytes) return std::nullopt;
  return kernels::PackSource{w.dtype, w.data, w.row_bytes != 0 ? w.row_bytes : *row_bytes, w.n,
                             w.name};
}

// WeightView::packed_tile_route for a matrix of k columns packed under `packing`: never with a
// zero-padded last block (packed_to_tiles writes whole blocks).
PackedTileRoute TileRouteFor(const WeightPacking& packing, int64_t k) {
  const bool tiles = k % kernels::kPackBlock == 0 && packing.precision == Precision::kFast &&
                     packing.kt != nullptr &&
                     packing.kt->packed_to_tiles != nullptr &&
                     packing.kt->tile_bf16_matmul != nullptr;
  return tiles ? PackedTileRoute::kManyRows : PackedTileRoute::kNever;
}

// Whole MiB rounded up, for the cap's messages.
std::string Mib(uint64_t bytes) { return std::to_string(CeilMiB(bytes)); }
}  // namespace

Status PackedBytesCap::CheckHeld() const {
  const uint64_t held = held_ ? held_() : 0;
  if (SaturatingAdd(charged_, held) <= cap_) return Status::Ok();
  return ResourceExhaustedError("the decrypted model files (" + Mib(held) + " MiB) pass the " + Mib(cap_) +
                                " MiB this load may take; loading stopped" + (hint_.empty() ? "" : ". " + hint_));
}

Status PackedBytesCap::Charge(uint64_t bytes, std::string_view name) {
  const uint64_t held = held_ ? held_() : 0;
  const uint64_t used = SaturatingAdd(charged_, held);
  if (bytes <= cap_ && used <= cap_ - bytes) {
    charged_ += bytes;
    return Status::Ok();
  }
  return ResourceExhaustedError(
      "the packed weights pass the " + Mib(cap_) + " MiB this load may take at " +
      (name.empty() ? std::string("a matrix") : "'" + std::string(name) + "'") + " (" + Mib(bytes) +
      " MiB, after " + Mib(charged_) + " MiB of packed weights" +
      (held > 0 ? " and " + Mib(held) + " MiB of decrypted model files" : std::string()) +
      "); loading stopped" + (hint_.empty() ? "" : ". " + hint_));
}

namespace {
// Charges the cap (if any) `most` bytes before a matrix is packed; Settle gives back what the
// packed matrix took less.
struct CapCharge {
  PackedBytesCap* cap;
  uint64_t most;
  void Settle(uint64_t took) const {
    if (cap != nullptr && took < most) cap->Refund(most - took);
  }
};
// The most an int8 packing of n columns of k `dtype` values takes: its format, or for float rows
// the column-scaled variant where that is larger (one block per column).
uint64_t MostPackedBytes(DType dtype, int64_t n, int64_t k) {
  const kernels::PackedFormat f = kernels::PackedFormatOf(dtype);
  const uint64_t bytes = kernels::PackedMatrix::BytesFor(f, n, k);
  if (f != kernels::PackedFormat::kQ8) return bytes;
  return std::max<uint64_t>(bytes, kernels::PackedMatrix::BytesFor(kernels::PackedFormat::kQ8Col, n, k));
}
Result<CapCharge> ChargeCap(const WeightPacking& packing, uint64_t most, std::string_view name) {
  if (packing.cap != nullptr) VLMD_RETURN_IF_ERROR(packing.cap->Charge(most, name));
  return CapCharge{packing.cap, most};
}
}  // namespace

Status PackWeight(const WeightPacking& packing, WeightView* w, PackedStore* store) {
  // bf16 rounds the weights (Q8_0's d * q included): fast precision only. Any k (the panels are
  // padded with zeros to whole tile steps).
  const auto row_bytes = RowBytes(w->dtype, w->k);
  if (packing.kt != nullptr && packing.bf16_tiles && packing.precision == Precision::kFast &&
      packing.kt->tile_bf16_matmul != nullptr && packing.kt->to_bf16 != nullptr &&
      kernels::TileBf16Matrix::CanPack(w->dtype) && w->data != nullptr && row_bytes) {
    VLMD_ASSIGN_OR_RETURN(const CapCharge charge,
                          ChargeCap(packing, kernels::TileBf16Matrix::BytesFor(w->n, w->k), w->name));
    VLMD_ASSIGN_OR_RETURN(
        std::unique_ptr<kernels::TileBf16Matrix> tm,
        kernels::TileBf16Matrix::Pack(w->dtype, w->data,
                                      w->row_bytes != 0 ? w->row_bytes : *row_bytes, w->n, w->k));
    charge.Settle(tm->bytes());
    w->tiles = tm.get();
    store->bf16.push_back(std::move(tm));
    return Status::Ok();
  }
  const auto source = PackableSource(packing, *w);
  if (!source) return Status::Ok();
  VLMD_ASSIGN_OR_RETURN(
      const CapCharge charge,
      ChargeCap(packing, MostPackedBytes(w->dtype, w->n, w->k), w->name));
  VLMD_ASSIGN_OR_RETURN(
      std::unique_ptr<kernels::PackedMatrix> pm,
      kernels::PackedMatrix::PackConcat(std::span(&*source, 1), w->k, packing.pool));
  charge.Settle(pm->bytes());
  w->packed = pm.get();
  w->packed_tile_route = TileRouteFor(packing, w->k);
  store->int8.push_back(std::move(pm));
  return Status::Ok();
}

Result<WeightView> PackFusedWeights(const WeightPacking& packing,
                                    std::span<const WeightView* const> parts, PackedStore* store) {
  WeightView fused;
  if (parts.empty()) return fused;
  std::vector<kernels::PackSource> sources;
  for (const WeightView* w : parts) {
    const auto source = PackableSource(packing, *w);
    if (!source || w->k != parts[0]->k ||
        kernels::PackedFormatOf(w->dtype) != kernels::PackedFormatOf(parts[0]->dtype)) {
      return fused;
    }
    sources.push_back(*source);
    fused.n += w->n;
  }
  VLMD_ASSIGN_OR_RETURN(
      const CapCharge charge,
      ChargeCap(packing, MostPackedBytes(parts[0]->dtype, fused.n, parts[0]->k), parts[0]->name));
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<kernels::PackedMatrix> pm,
                        kernels::PackedMatrix::PackConcat(sources, parts[0]->k, packing.pool));
  charge.Settle(pm->bytes());
  fused.dtype = parts[0]->dtype;
  fused.k = parts[0]->k;
  fused.packed = pm.get();
  fused.packed_tile_route = TileRouteFor(packing, fused.k);
  store->int8.push_back(std::move(pm));
  return fused;
}

PackedStore::PackedStore() = default;
PackedStore::~PackedStore() = default;
PackedStore::PackedStore(PackedStore&&) noexcept = default;
PackedStore& PackedStore::operator=(PackedStore&&) noexcept = default;

uint64_t PackedBytes(const PackedStore& store) {
  uint64_t b = 0;
  for (const auto& m : store.int8) b += m->bytes();
  for (const auto& m : store.bf16) b += m->bytes();
  return b;
}

PackingSummary& PackingSummary::operator+=(const PackingSummary& o) {
  float_column_scaled += o.float_column_scaled;
  float_q8_blocks += o.float_q8_blocks;
  quant_int8 += o.quant_int8;
  quant_4bit += o.quant_4bit;
  bf16_tiles += o.bf16_tiles;
  bytes += o.bytes;
  return *this;
}

std::string PackingSummary::ToString() const {
  if (matrices() == 0) return "none";
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  std::string s = std::to_string(matrices()) + " matrices, " + mib + ":";
  const char* sep = " ";
  auto part = [&](int count, const char* what) {
    if (count == 0) return;
    s += sep + std::to_string(count) + what;
    sep = ", ";
  };
  if (float_column_scaled + float_q8_blocks > 0) {
    s += sep + ("float " + std::to_string(float_column_scaled) + " column-scaled + " +
                std::to_string(float_q8_blocks) + " Q8_0-block");
    sep = ", ";
  }
  part(quant_int8, " int8 from quantized rows");
  part(quant_4bit, " 4-bit");
  part(bf16_tiles, " bf16 tiles");
  return s;
}

PackingSummary SummarizePacking(const PackedStore& store) {
  PackingSummary p;
  for (const auto& m : store.int8) {
    const bool from_float = m->from_float_rows();
    switch (m->format()) {
      case kernels::PackedFormat::kQ8Col: ++p.float_column_scaled; break;
      case kernels::PackedFormat::kQ8: ++(from_float ? p.float_q8_blocks : p.quant_int8); break;
      case kernels::PackedFormat::kQ4:
      case kernels::PackedFormat::kQ4K: ++p.quant_4bit; break;
    }
  }
  p.bf16_tiles = static_cast<int>(store.bf16.size());
  p.bytes = PackedBytes(store);
  return p;
}

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

namespace {
// MatMul without the epilogue, except on the tile path, which applies it block by block (then
// *epilogue_done is set).
Status MatMulCore(const kernels::KernelTable& kt, ThreadPool* pool, const WeightView& w,
                  const float* a, int64_t m, int64_t lda, float* out, int64_t ldo,
                  MatmulScratch* scratch, const MatmulEpilogue* epilogue, bool* epilogue_done) {
  if (m < 0 || w.n < 1 || w.k < 1) {
    return InvalidArgumentError("MatMul: bad shape m=" + std::to_string(m) + " n=" +
                                std::to_string(w.n) + " k=" + std::to_string(w.k));
  }
  if (m == 0) return Status::Ok();
  if (a == nullptr || out == nullptr ||
      (w.data == nullptr && w.packed == nullptr && w.tiles == nullptr)) {
    return InvalidArgumentError("MatMul: null weight, activation or output pointer");
  }
  if (lda < w.k || ldo < w.n) {
    return InvalidArgumentError("MatMul: lda " + std::to_string(lda) + " < k or ldo " +
                                std::to_string(ldo) + " < n");
  }
  VLMD_RETURN_IF_ERROR(CheckResidual(epilogue, out, ldo, m, w.n, "MatMul"));
  if (UsesTiles(kt, w)) {
    if (w.tiles->n() != w.n || w.tiles->k() != w.k) {
      return InvalidArgumentError("MatMul: the bf16 tile weight's shape differs from the view's");
    }
    if (scratch == nullptr) {
      return InvalidArgumentError("MatMul: a scratch buffer is required for bf16 tile weights");
    }
    const uint16_t* a16 = ConvertForTiles(kt, pool, a, m, lda, w.k, scratch);
    RunTiles(kt, pool, *w.tiles, TileArgs(a16, w.k, out, ldo, epilogue), m);
    if (epilogue != nullptr && epilogue->residual != nullptr) {
      ApplyResidual(pool, *epilogue, out, ldo, m, w.n);
    }
    *epilogue_done = true;
    return Status::Ok();
  }
  if (w.packed != nullptr && kt.packed_matmul != nullptr) {
    if (w.packed->n() != w.n || w.packed->k() != w.k) {
      return InvalidArgumentError("MatMul: the packed weight's shape differs from the view's");
    }
    if (scratch == nullptr) {
      return InvalidArgumentError("MatMul: a scratch buffer is required for packed weights");
    }
    *epilogue_done = true;  // per range or task, while the outputs are in cache
    if (UsesTilesForPacked(kt, w, m)) {
      return PackedMatMulOnTiles(kt, pool, w, a, m, lda, out, ldo, scratch, epilogue);
    }
    return PackedMatMul(kt, pool, w, a, m, lda, out, ldo, scratch, epilogue);
  }
  if (w.data == nullptr) {
    return UnimplementedError("MatMul: a fused packed weight needs the packed int8 kernel");
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
  internal::ForTasks(pool, n_mt * n_nt, [&](int64_t t, int /*worker*/) { run_tile(t); });
  return Status::Ok();
}

}  // namespace

Status MatMul(const kernels::KernelTable& kt, ThreadPool* pool, const WeightView& w, const float* a,
              int64_t m, int64_t lda, float* out, int64_t ldo, MatmulScratch* scratch,
              const MatmulEpilogue* epilogue) {
  bool done = false;
  VLMD_RETURN_IF_ERROR(MatMulCore(kt, pool, w, a, m, lda, out, ldo, scratch, epilogue, &done));
  if (epilogue != nullptr && !done && m > 0) {
    internal::ForRanges(pool, m, w.n, 1, [&](int64_t r0, int64_t r1) {
      ApplyEpilogue(*epilogue, out, ldo, r0, r1, 0, w.n);
    });
  }
  return Status::Ok();
}

Status MatMulShared(const kernels::KernelTable& kt, ThreadPool* pool,
                    std::span<const WeightView* const> ws, const float* a, int64_t m, int64_t lda,
                    std::span<float* const> outs, MatmulScratch* scratch,
                    std::span<const MatmulEpilogue* const> epilogues) {
  if (ws.size() != outs.size() || ws.empty() ||
      (!epilogues.empty() && epilogues.size() != ws.size())) {
    return InvalidArgumentError("MatMulShared: weights, outputs and epilogues differ in number");
  }
  auto epilogue = [&](size_t i) { return epilogues.empty() ? nullptr : epilogues[i]; };
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i] == nullptr) return InvalidArgumentError("MatMulShared: null output");
    // Every residual before any product is written (the per-weight MatMul checks again).
    VLMD_RETURN_IF_ERROR(CheckResidual(epilogue(i), outs[i], ws[i]->n, m, ws[i]->n,
                                       "MatMulShared"));
  }
  bool all_tiles = true;
  for (const WeightView* w : ws) {
    if (w->k != ws[0]->k) return InvalidArgumentError("MatMulShared: the weights differ in k");
    all_tiles = all_tiles && UsesTiles(kt, *w) && w->tiles->n() == w->n && w->tiles->k() == w->k;
  }
  if (!all_tiles || m < 1 || a == nullptr || scratch == nullptr || lda < ws[0]->k) {
    for (size_t i = 0; i < ws.size(); ++i) {
      VLMD_RETURN_IF_ERROR(
          MatMul(kt, pool, *ws[i], a, m, lda, outs[i], ws[i]->n, scratch, epilogue(i)));
    }
    return Status::Ok();
  }
  const uint16_t* a16 = ConvertForTiles(kt, pool, a, m, lda, ws[0]->k, scratch);
  for (size_t i = 0; i < ws.size(); ++i) {
    RunTiles(kt, pool, *ws[i]->tiles, TileArgs(a16, ws[i]->k, outs[i], ws[i]->n, epilogue(i)), m);
    if (epilogue(i) != nullptr && epilogue(i)->residual != nullptr) {
      ApplyResidual(pool, *epilogue(i), outs[i], ws[i]->n, m, ws[i]->n);
    }
  }
  return Status::Ok();
}

Status TileMatMul(const kernels::KernelTable& kt, ThreadPool* pool,
                  const kernels::TileBf16Matrix& w, const kernels::TileBf16Args& args, int64_t m) {
  if (kt.tile_bf16_matmul == nullptr) return UnimplementedError("TileMatMul: no AMX tile kernel");
  if (m < 0) return InvalidArgumentError("TileMatMul: m < 0");
  if (m == 0) return Status::Ok();
  if (args.a == nullptr || (args.out == nullptr && args.out_bf16 == nullptr)) {
    return InvalidArgumentError("TileMatMul: null activation or output");
  }
  if (args.lda < w.k_padded() || (args.out_bf16 != nullptr ? args.ldo_bf16 : args.ldo) < w.n()) {
    return InvalidArgumentError("TileMatMul: a row stride is smaller than its row");
  }
  if (args.out_bf16 != nullptr && args.accumulate) {
    return InvalidArgumentError("TileMatMul: a bf16 output cannot be accumulated into");
  }
  RunTiles(kt, pool, w, args, m);
  return Status::Ok();
}

}  // namespace vlmd::engine::ops
