// Flash-style attention of one head (tile_bf16.h, TileAttentionArgs) with NEON FMAs, for every
// aarch64 table (the neondot and neoni8mm tables inherit it): the driver of flash_attention_inl.h
// with its NEON row steps and the same bf16 operands as the x86 kernels, so the results differ
// from theirs only in the order of the f32 sums, in terms below 2^-126 of a row's largest (0
// here and on AVX2, denormals on the AVX-512 tables) and, against the avx512bf16 and amx tables,
// in denormal probabilities (vcvtneps2bf16 reads them as 0). As the AVX2 kernel: a K panel's row w
// holds 16 keys x the pair (2w, 2w + 1) of head dims (a V^T panel's row: 16 head dims x a pair of
// keys) as 32-bit words, read as four quarters of 4: a shift and a mask make each quarter's even
// and odd values 4 f32 lanes, which two FMAs multiply by one query's (or probability row's) pair,
// taken as lanes of an f32 copy of its row. Tiles of kRows rows x one panel (four quarters).
// Also the bf16 row conversions the attention's callers use (f32 and f16 rows to bf16, F32ToBF16's
// rounding bit for bit). Before it, aarch64 ran the encoder's and a prompt's attention on the
// f32 paths (two f32 GEMMs per head with a block of scores in memory).

#include <arm_neon.h>

#include <algorithm>

#include "engine/kernels/arm64/arm64_fill.h"
#include "engine/kernels/arm64/flash_rows_neon_inl.h"
#include "engine/kernels/flash_pair_fma_inl.h"
#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels {
namespace {

using flash::RoundToBf16x4;

// Query rows per register tile: 4 x 4 accumulators, the 4 panel quarters and 4 row pairs of the
// 32 NEON registers.
constexpr int kRows = 4;

// The pair-FMA steps of flash_pair_fma_inl.h.
struct NeonFma {
  // bf16 values to f32: the bits moved into the high half (exact). n a multiple of 8.
  static void Widen(const uint16_t* a, int64_t lda, int64_t rows, int64_t n, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; i += 8) {
        const uint16x8_t h = vld1q_u16(a + r * lda + i);
        vst1q_f32(out + r * n + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
        vst1q_f32(out + r * n + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
      }
    }
  }

  // C rows [0, R) x the 16 columns of one panel (+)= the sum over `pairs` steps w of A's row
  // pair w (f32 rows of `lda`) times row w of the panel (bf16 pairs at b + 32 w). Per step the
  // even values of the panel row (four quarters) meet every row's first value of the pair, then
  // the odd ones the second: 4R accumulators.
  template <int R, bool kAccumulate>
  static void Tile(const float* a, int64_t lda, const uint16_t* b, int64_t pairs, float* c,
                   int64_t ldc) {
    float32x4_t acc[R][4];
    for (int i = 0; i < R; ++i) {
      for (int h = 0; h < 4; ++h) {
        acc[i][h] = kAccumulate ? vld1q_f32(c + i * ldc + h * 4) : vdupq_n_f32(0.0f);
      }
    }
    const uint32x4_t high = vdupq_n_u32(0xFFFF0000u);
    for (int64_t w = 0; w < pairs; ++w) {
      const auto* row = reinterpret_cast<const uint32_t*>(b + w * 2 * kTileCols);
      uint32x4_t words[4];
      for (int h = 0; h < 4; ++h) words[h] = vld1q_u32(row + 4 * h);
      float32x2_t pair[R];
      for (int i = 0; i < R; ++i) pair[i] = vld1_f32(a + i * lda + 2 * w);
      for (int h = 0; h < 4; ++h) {
        const float32x4_t even = vreinterpretq_f32_u32(vshlq_n_u32(words[h], 16));
        for (int i = 0; i < R; ++i) acc[i][h] = vfmaq_lane_f32(acc[i][h], even, pair[i], 0);
      }
      for (int h = 0; h < 4; ++h) {
        const float32x4_t odd = vreinterpretq_f32_u32(vandq_u32(words[h], high));
        for (int i = 0; i < R; ++i) acc[i][h] = vfmaq_lane_f32(acc[i][h], odd, pair[i], 1);
      }
    }
    for (int i = 0; i < R; ++i) {
      for (int h = 0; h < 4; ++h) vst1q_f32(c + i * ldc + h * 4, acc[i][h]);
    }
  }
};

using Products = flash::PairFmaProducts<NeonFma, kRows>;

void TileAttentionNeon(const TileAttentionArgs& a) {
  flash::FlashAttention<Products::Score, Products::Accumulate, flash::NeonRows>(a);
}

// Rounds n values to bf16, 4 at a time: load(i) gives the f32 values [i, i + 4) (whole groups
// only); the last n % 4 go through a zero-padded copy made by tail(i, count, part).
template <typename Load, typename Tail>
void RoundRowToBf16(int64_t n, uint16_t* y, Load&& load, Tail&& tail) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, RoundToBf16x4(load(i)));
  if (i < n) {
    float part[4] = {};
    tail(i, n - i, part);
    uint16_t b[4];
    vst1_u16(b, RoundToBf16x4(vld1q_f32(part)));
    std::copy(b, b + (n - i), y + i);
  }
}

void ToBf16(const float* x, uint16_t* y, int64_t n) {
  RoundRowToBf16(
      n, y, [x](int64_t i) { return vld1q_f32(x + i); },
      [x](int64_t i, int64_t count, float* part) { std::copy(x + i, x + i + count, part); });
}

// f16 -> f32 (exact, fcvtl) -> bf16 with the same rounding as ToBf16.
void F16ToBf16(const uint16_t* x, uint16_t* y, int64_t n) {
  auto widen = [](uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); };
  RoundRowToBf16(
      n, y, [&](int64_t i) { return widen(vld1_u16(x + i)); },
      [&](int64_t i, int64_t count, float* part) {
        uint16_t h[4] = {};
        std::copy(x + i, x + i + count, h);
        vst1q_f32(part, widen(vld1_u16(h)));
      });
}

}  // namespace

void FillNeonAttention(KernelTable* t) {
  t->tile_attention = TileAttentionNeon;
  t->to_bf16 = ToBf16;
  t->f16_to_bf16 = F16ToBf16;
}

}  // namespace vlmd::engine::kernels
