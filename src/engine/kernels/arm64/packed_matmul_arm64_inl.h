// The aarch64 packed int8 matmul (layout in packed_int8.h), shared by the neon and neondot
// tables (and neoni8mm's single rows); they differ only in how 4-byte dots are computed (the Dot
// policy of the includer).
//
// The layout is the VNNI one: a panel block's k-quad is 64 bytes, 16 columns x 4 bytes, i.e.
// four 128-bit vectors of 4 columns, each multiplied by one 4-byte quad of the activation (a
// lane of a register holding 16 activation bytes) into 4 int32 lanes. Exactness:
//   - kQ8: stored bytes are u = w + 128; u ^ 0x80 is the signed weight w, so the dots give the
//     block dot directly and the offset bias is not needed.
//   - kQ4 / kQ4K: nibbles 0..15 are non-negative int8 values; a chunk of 64 bytes holds elements
//     8c..8c+3 in the low nibbles and 8c+4..8c+7 in the high ones. The -offset * sum(a) bias is
//     added in int32 as in the VNNI kernel.
// The block's integer dot is converted to f32 and accumulated with the scale d_w * d_a by one
// fused multiply-add (kQ4K then subtracts mn * (d_a * sum(a)) the same way; kQ8Col's sums take
// d_a alone and the column scales after the k loop), so the result is bit for bit
// PackedMatmulRef's.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "engine/kernels/packed_format_inl.h"
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/tile_table_inl.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels {
// Internal linkage: the including translation units are compiled with different ISA flags.
namespace {

inline float32x4_t LoadF16x4(const uint16_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

// Stores the 4 columns starting at `col` of one output row, only those below n.
inline void StoreColumns(float* out, int64_t col, int64_t n, float32x4_t v) {
  const int64_t left = n - col;
  if (left >= 4) {
    vst1q_f32(out + col, v);
  } else if (left > 0) {
    float tmp[4];
    vst1q_f32(tmp, v);
    for (int64_t j = 0; j < left; ++j) out[col + j] = tmp[j];
  }
}

// The signed weights of k-quads 2 pair and 2 pair + 1 of the 4 columns whose quants start at q:
// for kQ4/kQ4K the low and high nibbles of chunk `pair`, for kQ8 two stored quads with the
// +128 offset removed (u ^ 0x80 = u - 128).
template <int kFmt>
inline void LoadPair(const uint8_t* q, int pair, int8x16_t* w0, int8x16_t* w1) {
  if constexpr (FormatHasNibbles(kFmt)) {
    const uint8x16_t raw = vld1q_u8(q + pair * 64);
    *w0 = vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0F)));
    *w1 = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
  } else {
    const uint8x16_t flip = vdupq_n_u8(0x80);
    *w0 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + 2 * pair * 64), flip));
    *w1 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + (2 * pair + 1) * 64), flip));
  }
}

// Two k-quads of the 4 columns in w0 and w1 against activation quads kLane0 and kLane1 of the
// register `a` (16 activation bytes = 4 quads), added into `acc` by the policy Dot:
// Dot::TwoQuads<kLane0, kLane1>(acc, w0, w1, a). Pair kPair of a block is, for kQ4, chunk kPair
// (low nibbles: quad 2 kPair, high nibbles: quad 2 kPair + 1) and, for kQ8, quads 2 kPair and
// 2 kPair + 1; either way quads 0-3 are in the block's first 16 activation bytes.
template <class Dot, int kFmt, int MR, int kPair>
inline void PairDots(const uint8_t* q, const int8x16_t (&a)[MR], int32x4_t (&acc)[MR]) {
  constexpr int kLane0 = (2 * kPair) % 4, kLane1 = kLane0 + 1;
  int8x16_t w0, w1;
  LoadPair<kFmt>(q, kPair, &w0, &w1);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = Dot::template TwoQuads<kLane0, kLane1>(acc[i], w0, w1, a[i]);
}

#if defined(__ARM_FEATURE_DOTPROD)
// The Dot policy on SDOT: one vdotq_laneq_s32 per k-quad of 4 columns (the neondot table, and the
// neoni8mm table's single rows).
struct SdotQuads {
  template <int kLane0, int kLane1>
  static int32x4_t TwoQuads(int32x4_t acc, int8x16_t w0, int8x16_t w1, int8x16_t a) {
    return vdotq_laneq_s32(vdotq_laneq_s32(acc, w0, a, kLane0), w1, a, kLane1);
  }
};
#endif

// The integer dot of one 32-element block for the 4 columns whose quants start at q (a panel
// block's quants + 16 x the vector's quarter), for MR activation rows: acc[i] lanes =
// sum_e w[col][e] * a_i[e].
template <class Dot, int kFmt, int MR>
inline void BlockDots(const uint8_t* q, const int8x16_t (&a_lo)[MR],
                      const int8x16_t (&a_hi)[MR], int32x4_t (&acc)[MR]) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = vdupq_n_s32(0);
  PairDots<Dot, kFmt, MR, 0>(q, a_lo, acc);
  PairDots<Dot, kFmt, MR, 1>(q, a_lo, acc);
  PairDots<Dot, kFmt, MR, 2>(q, a_hi, acc);
  PairDots<Dot, kFmt, MR, 3>(q, a_hi, acc);
}

// The current block of NP consecutive panels: their quants, f16 scales and (kQ4K) mins, moved
// to the next block by Next() (kQ8Col: the quants only; ColumnScales(v) is for all blocks).
// Vector v (4 columns) of the tile is quarter v % 4 of panel v / 4.
template <int kFmt, int NP>
struct PanelCursor {
  static constexpr auto kFormat = static_cast<PackedFormat>(kFmt);
  static constexpr size_t kQsStride = GroupPanels(kFormat) * QsBytesPerBlock(kFormat);
  static constexpr int64_t kScaleStride = GroupPanels(kFormat) * kPanelCols;
  const uint8_t* qs[NP];
  const uint16_t* scales[NP];
  const uint16_t* mins[NP];
  const float* column_scales[NP];

  PanelCursor(const PackedMatrix& w, int64_t p) {
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
      qs[i] = w.qs(p + i, 0);
      scales[i] = w.scales(p + i, 0);
      mins[i] = w.mins(p + i, 0);
      column_scales[i] = FormatHasColumnScales(kFmt) ? w.column_scales(p + i) : nullptr;
    }
  }
  const uint8_t* Quants(int v) const { return qs[v / 4] + (v % 4) * 16; }
  float32x4_t Scales(int v) const { return LoadF16x4(scales[v / 4] + (v % 4) * 4); }
  float32x4_t Mins(int v) const { return LoadF16x4(mins[v / 4] + (v % 4) * 4); }
  float32x4_t ColumnScales(int v) const { return vld1q_f32(column_scales[v / 4] + (v % 4) * 4); }
  void Next() {
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
      qs[i] += kQsStride;
      if constexpr (!FormatHasColumnScales(kFmt)) scales[i] += kScaleStride;
      if constexpr (FormatHasMins(kFmt)) mins[i] += kScaleStride;
    }
  }
};

// kFmt: the PackedFormat as an int (kQ8 0, kQ4 1, kQ4K 2, kQ8Col 3). MR activation rows x NP
// panels; each panel is four vectors of 4 columns (v = 4 * panel + quarter).
template <class Dot, int kFmt, int MR, int NP>
void Tile(const PackedMatmulArgs& args, int64_t m, int64_t p) {
  constexpr bool kMins = FormatHasMins(kFmt);
  constexpr bool kColumns = FormatHasColumnScales(kFmt);
  constexpr int NV = 4 * NP;
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const int32_t offset = w.offset();
  const BlockQ8_0* a[MR];
  const int32_t* sums[MR];
  ActivationRows(args, m, nb, a, sums);
  PanelCursor<kFmt, NP> panels(w, p);
  float32x4_t f[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) f[i][v] = vdupq_n_f32(0.0f);

  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t a_lo[MR], a_hi[MR];
    float32x4_t da[MR];
    int32x4_t bias[MR];
    float32x4_t da_sum[MR];  // the min term's activation factor d_a * sum(a)
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      a_lo[i] = vld1q_s8(a[i][b].qs);
      a_hi[i] = vld1q_s8(a[i][b].qs + 16);
      const float da_i = F16ToF32(a[i][b].d);
      da[i] = vdupq_n_f32(da_i);
      bias[i] = vdupq_n_s32(-offset * sums[i][b]);
      if constexpr (kMins) da_sum[i] = vdupq_n_f32(da_i * static_cast<float>(sums[i][b]));
    }
    // One vector of 4 columns at a time, scaled into its f32 sums as soon as its integer dot is
    // done: only that vector's MR integer sums are live.
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      int32x4_t acc[MR];
      BlockDots<Dot, kFmt, MR>(panels.Quants(v), a_lo, a_hi, acc);
      if constexpr (kColumns) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) f[i][v] = vfmaq_f32(f[i][v], vcvtq_f32_s32(acc[i]), da[i]);
        continue;
      }
      const float32x4_t dw = panels.Scales(v);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        if constexpr (FormatHasNibbles(kFmt)) acc[i] = vaddq_s32(acc[i], bias[i]);
        f[i][v] = vfmaq_f32(f[i][v], vcvtq_f32_s32(acc[i]), vmulq_f32(dw, da[i]));
      }
      if constexpr (kMins) {
        const float32x4_t mw = panels.Mins(v);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) f[i][v] = vfmsq_f32(f[i][v], mw, da_sum[i]);
      }
    }
    panels.Next();
  }

  if constexpr (kColumns) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const float32x4_t dw = panels.ColumnScales(v);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) f[i][v] = vmulq_f32(f[i][v], dw);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* out = args.out + (m + i) * args.out_stride;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      StoreColumns(out, (p + v / 4) * kPanelCols + (v % 4) * 4, w.n(), f[i][v]);
    }
  }
}

// Tile shapes: one row (decode) takes 4 panels, so a 4-bit panel group is one contiguous stream;
// more rows take 2 rows x 2 panels (16 f32 sums of the 32 vector registers, the rest for the
// activations, weights and integer sums). Not yet tuned on hardware.
constexpr int kMaxMR = 2, kMaxNP = 4;
template <class Dot, int kFmt>
constexpr auto kTiles =
    TileTable<kMaxMR, kMaxNP>([]<int MR, int NP>() { return &Tile<Dot, kFmt, MR, NP>; });
constexpr int kGemmRows = kMaxMR;
constexpr int PanelsPerTile(int64_t rows) { return rows == 1 ? kMaxNP : 2; }

template <class Dot, int kFmt>
void PackedMatmulArm64(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                         int64_t p1) {
  const int64_t rows = m1 - m0;
  const int mr_max = rows < kGemmRows ? static_cast<int>(rows) : kGemmRows;
  const int np_max = PanelsPerTile(rows);
  for (int64_t p = p0; p < p1; p += np_max) {
    const int np = static_cast<int>(p1 - p < np_max ? p1 - p : np_max);
    for (int64_t m = m0; m < m1; m += mr_max) {
      const int mr = static_cast<int>(m1 - m < mr_max ? m1 - m : mr_max);
      kTiles<Dot, kFmt>[(mr - 1) * kMaxNP + (np - 1)](args, m, p);
    }
  }
}

// The kernel for a Dot policy (the table's function pointer).
template <class Dot>
void PackedMatmulFor(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                     int64_t p1) {
  ForPackedFormat(args.w->format(),
                  [&]<int kFmt>() { PackedMatmulArm64<Dot, kFmt>(args, m0, m1, p0, p1); });
}

}  // namespace
}  // namespace vlmd::engine::kernels
