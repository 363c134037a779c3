// AMX bf16 tile matmul (tile_bf16.h).
//
// Register blocking: 2 A tiles (32 activation rows) x 2 B tiles (32 output columns) feed 4 f32
// accumulator tiles, which is all 8 tile registers. Per 32-value k step that is 4 tile loads for
// 4 `tdpbf16ps` (each 16 x 16 x 32 multiply-adds). A whole 16 x 16 accumulator is stored straight
// into the output; edges (fewer rows or columns) and epilogues (bias, activation, accumulation,
// bf16 output) go through a 1 KB buffer per tile, so they need no special tile shapes. A block's
// epilogue runs a few rows at a time between the k steps of the next block, where the vector
// work overlaps the tile unit's (run after its own block, the tile unit idled through it).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/amx/amx_common.h"
#include "engine/kernels/x86/x86_fill.h"

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined here: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vlmd::engine::kernels {
namespace {

using amx::ConfigureTiles;

// Where one accumulator tile's values go: row `row`, column col0 of the output, rows x cols valid.
struct BlockPlace {
  int64_t row = 0, col0 = 0;
  int rows = 0, cols = 0;
};

// The epilogue (tile_bf16.h) on rows [r0, r1) of one buffered 16 x 16 block, then their valid
// values written (or added) to their place in the output.
void FinishRows(const TileBf16Args& args, float* block, const BlockPlace& place, int r0, int r1) {
  const int64_t row = place.row, col0 = place.col0;
  const int cols = place.cols;
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  const bool scaled = args.scale != 1.0f;
  if (scaled || args.bias != nullptr) {
    const __m512 bias = args.bias != nullptr ? _mm512_maskz_loadu_ps(mask, args.bias + col0)
                                             : _mm512_setzero_ps();
    for (int r = r0; r < r1; ++r) {
      __m512 v = _mm512_load_ps(block + r * 16);
      if (scaled) v = _mm512_mul_ps(v, _mm512_set1_ps(args.scale));
      _mm512_store_ps(block + r * 16, _mm512_add_ps(v, bias));
    }
  }
  // Whole rows at once (the columns past `cols` hold products with zero padding).
  if (args.act != nullptr) args.act(block + r0 * 16, block + r0 * 16, 16 * (r1 - r0));
  if (args.out_bf16 != nullptr) {
    for (int r = r0; r < r1; ++r) {
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_load_ps(block + r * 16));
      _mm256_mask_storeu_epi16(args.out_bf16 + (row + r) * args.ldo_bf16 + col0, mask,
                               reinterpret_cast<const __m256i&>(b));
    }
    return;
  }
  for (int r = r0; r < r1; ++r) {
    __m512 v = _mm512_load_ps(block + r * 16);
    float* o = args.out + (row + r) * args.ldo + col0;
    if (args.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, o));
    _mm512_mask_storeu_ps(o, mask, v);
  }
}

// The buffered accumulator tiles of the last block whose epilogue has not run yet, finished a
// few rows at a time. The activation is a call between tile instructions: TileActFn never
// touches the tile unit (tile_bf16.h), so the accumulators and the configuration stay.
struct PendingEpilogue {
  alignas(64) float buf[4][256];
  BlockPlace place[4];
  bool buffered[4] = {};
  int tile = 4;  // the next tile to finish, 4 when none is left
  int row = 0;   // its next row

  bool active() const { return tile < 4; }
  // After the accumulators went to buf (buffered[t] set for those that did).
  void Start() {
    tile = 0;
    row = 0;
  }
  // Finishes up to `rows` more rows.
  void Advance(const TileBf16Args& args, int rows) {
    while (rows > 0 && tile < 4) {
      if (!buffered[tile]) {
        ++tile;
        continue;
      }
      const int n = std::min(rows, place[tile].rows - row);
      FinishRows(args, buf[tile], place[tile], row, row + n);
      row += n;
      rows -= n;
      if (row == place[tile].rows) {
        buffered[tile] = false;
        ++tile;
        row = 0;
      }
    }
  }
  void Finish(const TileBf16Args& args) { Advance(args, 4 * 16); }
};

// Stores one accumulator tile (row tile i of the block at row m, panel p): a whole 16 x 16 block
// without an epilogue goes straight into the output rows and false is returned; edges (fewer rows
// or columns) and epilogues go to `buf` (then true: its epilogue is pending). store(dst,
// stride_bytes) stores the tile (the tile register must be a literal in the intrinsic, hence the
// callable).
template <typename Store>
inline bool StoreAccumulator(const TileBf16Args& args, bool plain, int64_t m, int64_t m1,
                             int64_t p, int i, float* buf, BlockPlace* place, Store store) {
  place->row = m + 16 * i;
  place->col0 = p * kTileCols;
  place->rows = static_cast<int>(std::min<int64_t>(16, m1 - place->row));
  place->cols = static_cast<int>(std::min<int64_t>(16, args.n - place->col0));
  if (place->rows <= 0 || place->cols <= 0) return false;
  if (plain && place->rows == 16 && place->cols == 16) {
    store(args.out + place->row * args.ldo + place->col0,
          static_cast<size_t>(args.ldo) * sizeof(float));
    return false;
  }
  store(buf, size_t{64});
  return true;
}

// One block of MA x 16 rows by NB x 16 columns, starting at row m and panel p; the previous
// block's pending epilogue runs between its k steps, and its own becomes the pending one.
template <int MA, int NB>
void TileBlock(const TileBf16Args& args, bool plain, int64_t m, int64_t m1, int64_t p,
               PendingEpilogue* pending) {
  const int64_t steps = args.k / kTileK;
  // Rows of the pending epilogue per k step: all 64 by the last step (no step: Finish below).
  const int rows_per_step = steps > 0 ? static_cast<int>((4 * 16 + steps - 1) / steps) : 0;
  const size_t a_stride = static_cast<size_t>(args.lda) * sizeof(uint16_t);
  const uint16_t* a0 = args.a + m * args.lda;
  const uint16_t* a1 = a0 + 16 * args.lda;
  const uint16_t* b0 = args.w + p * args.k * kTileCols;
  const uint16_t* b1 = b0 + args.k * kTileCols;
  _tile_zero(0);
  if constexpr (NB == 2) _tile_zero(1);
  if constexpr (MA == 2) _tile_zero(2);
  if constexpr (MA == 2 && NB == 2) _tile_zero(3);
  for (int64_t c = 0; c < steps; ++c) {
    _tile_loadd(4, a0 + c * kTileK, a_stride);
    _tile_loadd(6, b0 + c * kTileK * kTileCols, 64);
    if constexpr (NB == 2) _tile_loadd(7, b1 + c * kTileK * kTileCols, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MA == 2) {
      _tile_loadd(5, a1 + c * kTileK, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NB == 2) _tile_dpbf16ps(3, 5, 7);
    }
    if (pending->active()) pending->Advance(args, rows_per_step);
  }
  pending->Finish(args);  // its buffers take this block's accumulators next
  float(*buf)[256] = pending->buf;
  BlockPlace* place = pending->place;
  bool* buffered = pending->buffered;
  buffered[0] = StoreAccumulator(args, plain, m, m1, p, 0, buf[0], &place[0],
                                 [](float* d, size_t s) { _tile_stored(0, d, s); });
  if constexpr (NB == 2) {
    buffered[1] = StoreAccumulator(args, plain, m, m1, p + 1, 0, buf[1], &place[1],
                                   [](float* d, size_t s) { _tile_stored(1, d, s); });
  }
  if constexpr (MA == 2) {
    buffered[2] = StoreAccumulator(args, plain, m, m1, p, 1, buf[2], &place[2],
                                   [](float* d, size_t s) { _tile_stored(2, d, s); });
  }
  if constexpr (MA == 2 && NB == 2) {
    buffered[3] = StoreAccumulator(args, plain, m, m1, p + 1, 1, buf[3], &place[3],
                                   [](float* d, size_t s) { _tile_stored(3, d, s); });
  }
  pending->Start();
}

// Rows [m0, m1) x panels [p0, p1): panel pairs outside, row pairs inside, so that a pair of B
// panels stays in L1/L2 while the activation rows stream past it. m0 must be a multiple of 16.
void TileBf16MatmulAmx(const TileBf16Args& args, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  ConfigureTiles();
  const bool plain = args.PlainStore();
  PendingEpilogue pending;
  for (int64_t p = p0; p < p1; p += 2) {
    const bool two_panels = p + 1 < p1;
    for (int64_t m = m0; m < m1; m += 32) {
      const bool two_rows = m1 - m > 16;
      if (two_rows && two_panels) {
        TileBlock<2, 2>(args, plain, m, m1, p, &pending);
      } else if (two_rows) {
        TileBlock<2, 1>(args, plain, m, m1, p, &pending);
      } else if (two_panels) {
        TileBlock<1, 2>(args, plain, m, m1, p, &pending);
      } else {
        TileBlock<1, 1>(args, plain, m, m1, p, &pending);
      }
    }
  }
  pending.Finish(args);
  _tile_release();
}

}  // namespace

void FillAmxKernels(KernelTable* t) {
  // The bf16 row conversions and tile packing come from the AVX512-BF16 table
  // (avx512bf16/bf16_rows_avx512bf16.cpp); AMX adds the tile products.
  t->tile_bf16_matmul = TileBf16MatmulAmx;
  t->tile_attention = amx::TileAttentionAmx;
  // The bf16 tiles outrun vpdpbusd by far: the encoders' attention stays on them.
  t->tile_attention_i8 = nullptr;
  t->quantize_queries_i8 = nullptr;
  t->pack_keys_i8 = nullptr;
  FillAmxPackedToTiles(t);
}

}  // namespace vlmd::engine::kernels
