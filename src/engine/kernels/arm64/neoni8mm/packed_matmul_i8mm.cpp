// The packed int8 matmul on the int8 matrix multiply SMMLA (FEAT_I8MM: Neoverse V1/V2/N2,
// Graviton 3/4, Apple M2 and later), for two or more activation rows; a single row (decode, or
// the last of an odd count) takes the SDOT tiles, which every such CPU has.
//
// SMMLA multiplies a 2 x 8 int8 matrix (two activation rows, 8 k-steps) by the transpose of
// another 2 x 8 (two weight columns, the same 8 k-steps) into a 2 x 2 int32 block
// [r0c0, r0c1, r1c0, r1c1]: 32 multiply-adds per instruction, twice SDOT's 16. The packed layout
// keeps 4 bytes (one k-quad) per column; the two quads of an 8-step group sit in two vectors
// (kQ8: quads 2g and 2g + 1; kQ4/kQ4K: the low and high nibbles of chunk g), and zipping their
// 32-bit lanes gives exactly the 2 x 8 operands of columns (c0, c1) and (c2, c3). The f32 sums
// stay in the 2 x 2 layout over the whole k loop (scales and biases are built in that layout)
// and are split into rows only when stored. Exact like the other packed kernels: the same
// integer block dots, then the same fused multiply-add per block as PackedMatmulRef.
#include <arm_neon.h>

#include "engine/kernels/arm64/arm64_fill.h"
#include "engine/kernels/arm64/packed_matmul_arm64_inl.h"

namespace vlmd::engine::kernels {
namespace {

// [x0, x1, x0, x1] and [x2, x3, x2, x3]: per-column values in the 2 x 2 layout.
inline float32x4_t LowPair(float32x4_t x) { return vcombine_f32(vget_low_f32(x), vget_low_f32(x)); }
inline float32x4_t HighPair(float32x4_t x) {
  return vcombine_f32(vget_high_f32(x), vget_high_f32(x));
}

// Rows m and m + 1 x NP panels (NV = 4 NP vectors of 4 columns, each two 2 x 2 blocks).
template <int kFmt, int NP>
void MmlaTile(const PackedMatmulArgs& args, int64_t m, int64_t p) {
  constexpr bool kMins = FormatHasMins(kFmt);
  constexpr bool kColumns = FormatHasColumnScales(kFmt);
  constexpr int NV = 4 * NP;
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const int32_t offset = w.offset();
  const auto* a0 = reinterpret_cast<const BlockQ8_0*>(args.a + m * args.a_row_bytes);
  const auto* a1 = reinterpret_cast<const BlockQ8_0*>(args.a + (m + 1) * args.a_row_bytes);
  const int32_t* sums0 = args.a_sums + m * nb;
  const int32_t* sums1 = args.a_sums + (m + 1) * nb;
  PanelCursor<kFmt, NP> panels(w, p);
  float32x4_t f[NV][2];  // vector v, columns (0, 1) and (2, 3) of it: [r0c0, r0c1, r1c0, r1c1]
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) f[v][0] = f[v][1] = vdupq_n_f32(0.0f);

  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t act[4];  // k-steps 8g..8g+7 of row m, then of row m + 1
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) act[g] = vcombine_s8(vld1_s8(a0[b].qs + 8 * g), vld1_s8(a1[b].qs + 8 * g));
    const float da0 = F16ToF32(a0[b].d), da1 = F16ToF32(a1[b].d);
    const float32x4_t da = {da0, da0, da1, da1};
    const int32x4_t bias = {-offset * sums0[b], -offset * sums0[b], -offset * sums1[b],
                            -offset * sums1[b]};
    float32x4_t da_sum;  // the min term's activation factor d_a * sum(a), per row
    if constexpr (kMins) {
      const float s0 = da0 * static_cast<float>(sums0[b]), s1 = da1 * static_cast<float>(sums1[b]);
      da_sum = float32x4_t{s0, s0, s1, s1};
    }
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const uint8_t* q = panels.Quants(v);
      int32x4_t acc01 = vdupq_n_s32(0), acc23 = vdupq_n_s32(0);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        int8x16_t w0, w1;  // k-quads 2g and 2g + 1 of the vector's 4 columns
        LoadPair<kFmt>(q, g, &w0, &w1);
        const int32x4_t w0s = vreinterpretq_s32_s8(w0), w1s = vreinterpretq_s32_s8(w1);
        acc01 = vmmlaq_s32(acc01, act[g], vreinterpretq_s8_s32(vzip1q_s32(w0s, w1s)));
        acc23 = vmmlaq_s32(acc23, act[g], vreinterpretq_s8_s32(vzip2q_s32(w0s, w1s)));
      }
      if constexpr (FormatHasNibbles(kFmt)) {
        acc01 = vaddq_s32(acc01, bias);
        acc23 = vaddq_s32(acc23, bias);
      }
      if constexpr (kColumns) {  // the column scales after the k loop
        f[v][0] = vfmaq_f32(f[v][0], vcvtq_f32_s32(acc01), da);
        f[v][1] = vfmaq_f32(f[v][1], vcvtq_f32_s32(acc23), da);
        continue;
      }
      const float32x4_t dw = panels.Scales(v);
      f[v][0] = vfmaq_f32(f[v][0], vcvtq_f32_s32(acc01), vmulq_f32(LowPair(dw), da));
      f[v][1] = vfmaq_f32(f[v][1], vcvtq_f32_s32(acc23), vmulq_f32(HighPair(dw), da));
      if constexpr (kMins) {
        const float32x4_t mw = panels.Mins(v);
        f[v][0] = vfmsq_f32(f[v][0], LowPair(mw), da_sum);
        f[v][1] = vfmsq_f32(f[v][1], HighPair(mw), da_sum);
      }
    }
    panels.Next();
  }

  if constexpr (kColumns) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const float32x4_t dw = panels.ColumnScales(v);
      f[v][0] = vmulq_f32(f[v][0], LowPair(dw));
      f[v][1] = vmulq_f32(f[v][1], HighPair(dw));
    }
  }
  float* out0 = args.out + m * args.out_stride;
  float* out1 = out0 + args.out_stride;
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    const int64_t col = (p + v / 4) * kPanelCols + (v % 4) * 4;
    StoreColumns(out0, col, w.n(), vcombine_f32(vget_low_f32(f[v][0]), vget_low_f32(f[v][1])));
    StoreColumns(out1, col, w.n(), vcombine_f32(vget_high_f32(f[v][0]), vget_high_f32(f[v][1])));
  }
}

// Two rows x 2 panels: 16 f32 sums of the 32 vector registers, beside the 4 activation
// operands, two integer blocks and the weights. Not yet tuned on hardware.
constexpr int kMmlaPanels = 2;
template <int kFmt>
constexpr auto kMmlaTiles =
    TileTable<1, kMmlaPanels>([]<int, int NP>() { return &MmlaTile<kFmt, NP>; });

template <int kFmt>
void PackedMatmulI8mm(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                      int64_t p1) {
  const int64_t pairs_end = m0 + (m1 - m0) / 2 * 2;
  if (pairs_end > m0) {
    for (int64_t p = p0; p < p1; p += kMmlaPanels) {
      const int np = static_cast<int>(p1 - p < kMmlaPanels ? p1 - p : kMmlaPanels);
      for (int64_t m = m0; m < pairs_end; m += 2) kMmlaTiles<kFmt>[np - 1](args, m, p);
    }
  }
  if (pairs_end < m1) PackedMatmulArm64<SdotQuads, kFmt>(args, pairs_end, m1, p0, p1);
}

void PackedMatmulDispatch(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                          int64_t p1) {
  ForPackedFormat(args.w->format(),
                  [&]<int kFmt>() { PackedMatmulI8mm<kFmt>(args, m0, m1, p0, p1); });
}

}  // namespace

void FillNeonI8mmPackedMatmul(KernelTable* t) { t->packed_matmul = &PackedMatmulDispatch; }

}  // namespace vlmd::engine::kernels
