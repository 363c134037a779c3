// aarch64 micro-kernel of the packed int8 matmul (layout in packed_int8.h) on the signed dot
// product SDOT (vdotq_laneq_s32: Neoverse N1 and later, Graviton 2+, Ampere Altra, Apple M1+).
//
// The layout is the VNNI one: a panel block's k-quad is 64 bytes, 16 columns x 4 bytes, i.e.
// four 128-bit vectors of 4 columns. One SDOT multiplies such a vector by one 4-byte quad of the
// activation (a lane of a register holding 16 activation bytes) and adds the 4 dots into 4 int32
// lanes, so a 32-element block of one row is 8 SDOTs per 4 columns. Exactness:
//   - kQ8: stored bytes are u = w + 128; u ^ 0x80 is the signed weight w, so SDOT gives the
//     block dot directly and the offset bias is not needed.
//   - kQ4 / kQ4K: nibbles 0..15 are non-negative int8 values; a chunk of 64 bytes holds elements
//     8c..8c+3 in the low nibbles and 8c+4..8c+7 in the high ones. The -offset * sum(a) bias is
//     added in int32 as in the VNNI kernel.
// The block's integer dot is converted to f32 and accumulated with the scale d_w * d_a by one
// fused multiply-add (kQ4K then subtracts mn * d_a * sum(a) the same way), so the result is bit
// for bit PackedMatmulRef's.
#include <arm_neon.h>

#include "engine/kernels/arm64/arm64_fill.h"
#include "engine/kernels/packed_format_inl.h"
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/tile_table_inl.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels {
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

// The integer dot of one 32-element block for the 4 columns of vector `v` (0..3) of a panel,
// for MR activation rows: acc[i] lanes = sum_e w[col][e] * a_i[e].
template <int kFmt, int MR>
inline void BlockDots(const uint8_t* q, int v, const int8x16_t (&a_lo)[MR],
                      const int8x16_t (&a_hi)[MR], int32x4_t (&acc)[MR]) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = vdupq_n_s32(0);
  if constexpr (kFmt != 0) {
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    // Chunk c: quads 2c (low nibbles) and 2c + 1 (high nibbles); quads 0-3 are in a_lo.
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const uint8x16_t raw = vld1q_u8(q + c * 64 + v * 16);
      const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(raw, low4));
      const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const int8x16_t& a = c < 2 ? a_lo[i] : a_hi[i];
        // Lanes are compile-time constants once the c loop is unrolled.
        switch (c) {
          case 0: acc[i] = vdotq_laneq_s32(vdotq_laneq_s32(acc[i], lo, a, 0), hi, a, 1); break;
          case 1: acc[i] = vdotq_laneq_s32(vdotq_laneq_s32(acc[i], lo, a, 2), hi, a, 3); break;
          case 2: acc[i] = vdotq_laneq_s32(vdotq_laneq_s32(acc[i], lo, a, 0), hi, a, 1); break;
          default: acc[i] = vdotq_laneq_s32(vdotq_laneq_s32(acc[i], lo, a, 2), hi, a, 3); break;
        }
      }
    }
  } else {
    const uint8x16_t flip = vdupq_n_u8(0x80);
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const int8x16_t ws = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + k4 * 64 + v * 16), flip));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const int8x16_t& a = k4 < 4 ? a_lo[i] : a_hi[i];
        switch (k4 % 4) {
          case 0: acc[i] = vdotq_laneq_s32(acc[i], ws, a, 0); break;
          case 1: acc[i] = vdotq_laneq_s32(acc[i], ws, a, 1); break;
          case 2: acc[i] = vdotq_laneq_s32(acc[i], ws, a, 2); break;
          default: acc[i] = vdotq_laneq_s32(acc[i], ws, a, 3); break;
        }
      }
    }
  }
}

// kFmt: the PackedFormat as an int (kQ8 0, kQ4 1, kQ4K 2). MR activation rows x NP panels; each
// panel is four vectors of 4 columns (v = 4 * panel + quarter).
template <int kFmt, int MR, int NP>
void Tile(const PackedMatmulArgs& args, int64_t m, int64_t p) {
  constexpr bool kMins = kFmt == 2;
  constexpr int NV = 4 * NP;
  constexpr auto kFormat = static_cast<PackedFormat>(kFmt);
  constexpr size_t qstride = GroupPanels(kFormat) * QsBytesPerBlock(kFormat);
  constexpr int64_t sstride = GroupPanels(kFormat) * kPanelCols;
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const int32_t offset = w.offset();
  const BlockQ8_0* a[MR];
  const int32_t* sums[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    a[i] = reinterpret_cast<const BlockQ8_0*>(args.a + (m + i) * args.a_row_bytes);
    sums[i] = args.a_sums + (m + i) * nb;
  }
  const uint8_t* wq[NP];
  const uint16_t* ws[NP];
  const uint16_t* wm[NP];
#pragma GCC unroll 8
  for (int v = 0; v < NP; ++v) {
    wq[v] = w.qs(p + v, 0);
    ws[v] = w.scales(p + v, 0);
    wm[v] = w.mins(p + v, 0);
  }
  float32x4_t f[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) f[i][v] = vdupq_n_f32(0.0f);

  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t a_lo[MR], a_hi[MR];
    float32x4_t da[MR];
    int32x4_t bias[MR];
    float32x4_t sum_a[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      a_lo[i] = vld1q_s8(a[i][b].qs);
      a_hi[i] = vld1q_s8(a[i][b].qs + 16);
      da[i] = vdupq_n_f32(F16ToF32(a[i][b].d));
      bias[i] = vdupq_n_s32(-offset * sums[i][b]);
      if constexpr (kMins) sum_a[i] = vdupq_n_f32(static_cast<float>(sums[i][b]));
    }
    // One vector of 4 columns at a time, scaled into its f32 sums as soon as its integer dot is
    // done: only that vector's MR integer sums are live.
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      int32x4_t acc[MR];
      BlockDots<kFmt, MR>(wq[v / 4], v % 4, a_lo, a_hi, acc);
      const float32x4_t dw = LoadF16x4(ws[v / 4] + (v % 4) * 4);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        if constexpr (kFmt != 0) acc[i] = vaddq_s32(acc[i], bias[i]);
        f[i][v] = vfmaq_f32(f[i][v], vcvtq_f32_s32(acc[i]), vmulq_f32(dw, da[i]));
      }
      if constexpr (kMins) {
        const float32x4_t mw = LoadF16x4(wm[v / 4] + (v % 4) * 4);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) f[i][v] = vfmsq_f32(f[i][v], vmulq_f32(mw, da[i]), sum_a[i]);
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) {
      wq[v] += qstride;
      ws[v] += sstride;
      if constexpr (kMins) wm[v] += sstride;
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
template <int kFmt>
constexpr auto kTiles =
    TileTable<kMaxMR, kMaxNP>([]<int MR, int NP>() { return &Tile<kFmt, MR, NP>; });
constexpr int kGemmRows = kMaxMR;
constexpr int PanelsPerTile(int64_t rows) { return rows == 1 ? kMaxNP : 2; }

template <int kFmt>
void PackedMatmulNeonDot(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                         int64_t p1) {
  const int64_t rows = m1 - m0;
  const int mr_max = rows < kGemmRows ? static_cast<int>(rows) : kGemmRows;
  const int np_max = PanelsPerTile(rows);
  for (int64_t p = p0; p < p1; p += np_max) {
    const int np = static_cast<int>(p1 - p < np_max ? p1 - p : np_max);
    for (int64_t m = m0; m < m1; m += mr_max) {
      const int mr = static_cast<int>(m1 - m < mr_max ? m1 - m : mr_max);
      kTiles<kFmt>[(mr - 1) * kMaxNP + (np - 1)](args, m, p);
    }
  }
}

void PackedMatmulDispatch(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                          int64_t p1) {
  ForPackedFormat(args.w->format(),
                  [&]<int kFmt>() { PackedMatmulNeonDot<kFmt>(args, m0, m1, p0, p1); });
}

}  // namespace

void FillNeonDotPackedMatmul(KernelTable* t) { t->packed_matmul = &PackedMatmulDispatch; }

}  // namespace vlmd::engine::kernels
