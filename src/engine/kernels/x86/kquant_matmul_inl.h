// Integer-dot matmul tiles for the k-quants (Q4_K, Q5_K, Q6_K) against Q8_K activations, in
// 256-bit vectors; compiled once per ISA (see simd_inl.h).
//
// Per 256-element super-block the quants are unsigned (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63), so
// maddubs(q, a) never saturates (63 * 127 * 2 < 32767); madd against the broadcast sub-block
// scales both widens to int32 and applies the integer scale in one instruction. The min / -32
// offset terms use the activation block sums (Q8_K bsums). Everything up to one f32 conversion
// per super-block is exact integer arithmetic.
#pragma once

#include "engine/kernels/x86/keep_in_register_inl.h"
#include "engine/kernels/x86/simd_inl.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels::VLMD_X86_NS {

// Unpacks the 12-byte 6-bit scales/mins of Q4_K/Q5_K into sc[0..7] (bytes 0..7), m[0..7] (8..15).
// Sub-blocks 0..3 keep their 6 bits in bytes 0..7; 4..7 take 4 low bits from bytes 8..11 and their
// top 2 bits from the top bits of bytes 0..7.
inline __m128i UnpackScalesMinsK4(const uint8_t* q) {
  const uint32_t u0 = LoadU32(q), u1 = LoadU32(q + 4), u2 = LoadU32(q + 8);
  const uint32_t sc_lo = u0 & 0x3f3f3f3fu;
  const uint32_t m_lo = u1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                        static_cast<int>(m_hi));
}

// Q4_K / Q5_K: 8 sub-blocks of 32, x = d sc_s q - dmin m_s.
// dot = d d_a sum_s sc_s (q . a)_s - dmin d_a sum_s m_s (bsum_{2s} + bsum_{2s+1}).
template <bool kFifthBit>
struct QK4Kernel {
  using WBlock = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;

  template <int MR, int NR>
  static void Tile(const MatmulArgs& p, int64_t m, int64_t n) {
    const int64_t nb = p.k / kQK_K;
    const WBlock* w[NR];
    const BlockQ8_K* a[MR];
    for (int j = 0; j < NR; ++j) w[j] = reinterpret_cast<const WBlock*>(p.w + (n + j) * p.w_row_bytes);
    for (int i = 0; i < MR; ++i) a[i] = reinterpret_cast<const BlockQ8_K*>(p.a + (m + i) * p.a_row_bytes);
    __m256 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      for (int j = 0; j < NR; ++j) {
        const WBlock& x = w[j][b];
        const float d = HalfToFloat(x.d), dmin = HalfToFloat(x.dmin);
        const __m128i scm = UnpackScalesMinsK4(x.scales);
        // Both 128-bit lanes hold sc0..sc7 as int16, so a lane-local shuffle can broadcast any.
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        // mins duplicated per 16-element bsum: [m0 m0 m1 m1 ... m7 m7].
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
        // Sub-block by sub-block, each one's quants and scale serving every row before the
        // next are made: all 8 of each live across the rows did not fit the 16 registers of
        // AVX2 and spilled every block (the same integers in another order).
        __m256i sum[MR];
        for (int i = 0; i < MR; ++i) sum[i] = _mm256_setzero_si256();
        // Q5_K: the fifth bits of all 256 values, bit s of byte e for element 32 s + e.
        __m256i hb{};
        if constexpr (kFifthBit) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh));
        for (int s2 = 0; s2 < 4; ++s2) {
          const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * s2));
          __m256i q[2] = {_mm256_and_si256(bytes, low4),
                          _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4)};
          if constexpr (kFifthBit) {
            const __m256i one = _mm256_set1_epi8(1);
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * s2), one);
            const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * s2 + 1), one);
            q[0] = _mm256_or_si256(q[0], _mm256_slli_epi16(h0, 4));
            q[1] = _mm256_or_si256(q[1], _mm256_slli_epi16(h1, 4));
          }
          for (int h = 0; h < 2; ++h) {
            const int s = 2 * s2 + h;
            const __m256i scale = _mm256_shuffle_epi8(
                sc16, _mm256_set1_epi16(static_cast<int16_t>((2 * s) | ((2 * s + 1) << 8))));
            for (int i = 0; i < MR; ++i) {
              const __m256i av =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i][b].qs + 32 * s));
              sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q[h], av), scale));
              KeepInRegister(sum[i]);
            }
          }
        }
        for (int i = 0; i < MR; ++i) {
          const BlockQ8_K& y = a[i][b];
          const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
          const __m256i msum = _mm256_madd_epi16(bs, mins16);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(d * y.d), acc[i][j]);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(-dmin * y.d), acc[i][j]);
        }
      }
    }
    StoreTile<MR, NR>(p, m, n, acc);
  }
};

// Q6_K: 16 sub-blocks of 16, x = d sc_s (q - 32), q = 4 low bits (ql) | 2 high bits (qh) << 4.
// dot = d d_a (sum_s sc_s (q . a)_s - 32 sum_s sc_s bsum_s).
struct Q6KKernel {
  template <int MR, int NR>
  static void Tile(const MatmulArgs& p, int64_t m, int64_t n) {
    const int64_t nb = p.k / kQK_K;
    const BlockQ6_K* w[NR];
    const BlockQ8_K* a[MR];
    for (int j = 0; j < NR; ++j) w[j] = reinterpret_cast<const BlockQ6_K*>(p.w + (n + j) * p.w_row_bytes);
    for (int i = 0; i < MR; ++i) a[i] = reinterpret_cast<const BlockQ8_K*>(p.a + (m + i) * p.a_row_bytes);
    __m256 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < nb; ++b) {
      for (int j = 0; j < NR; ++j) {
        const BlockQ6_K& x = w[j][b];
        const float d = HalfToFloat(x.d);
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // 16 scales as int16
        // q: 32 consecutive elements 32 g .. 32 g + 31 (sub-blocks 2g, 2g + 1), made one at a
        // time and used by every row (as QK4Kernel: all 8 live across the rows spilled on AVX2).
        __m256i sum[MR];
        for (int i = 0; i < MR; ++i) sum[i] = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = x.ql + 64 * h;
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * h));
          const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
          const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
          for (int g = 0; g < 4; ++g) {
            const __m256i l = g % 2 == 0 ? l0 : l1;
            const __m256i lo = g < 2 ? _mm256_and_si256(l, low4)
                                     : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), low2);
            const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
            // int16 [sc_{2s} x8 | sc_{2s+1} x8], matching maddubs' 16 pair sums.
            const int sg = 4 * h + g;
            const __m256i scale = _mm256_setr_m128i(_mm_set1_epi16(x.scales[2 * sg]),
                                                    _mm_set1_epi16(x.scales[2 * sg + 1]));
            for (int i = 0; i < MR; ++i) {
              const __m256i av =
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i][b].qs + 32 * sg));
              sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, av), scale));
              KeepInRegister(sum[i]);
            }
          }
        }
        for (int i = 0; i < MR; ++i) {
          const BlockQ8_K& y = a[i][b];
          const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
          sum[i] = _mm256_sub_epi32(sum[i], _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(d * y.d), acc[i][j]);
        }
      }
    }
    StoreTile<MR, NR>(p, m, n, acc);
  }
};

#if defined(__AVX512VL__)
inline constexpr int kKGemmMR = 4, kKGemmNR = 2;
#else
inline constexpr int kKGemmMR = 2, kKGemmNR = 2;
#endif
inline constexpr int kKGemvNR = 2;

inline void FillKQuantMatmul(KernelTable* t) {
  auto set = [t](DType w, MatmulFn fn) {
    t->matmul[static_cast<int>(w)] = fn;
    t->act_type[static_cast<int>(w)] = DType::kQ8_K;
  };
  set(DType::kQ4_K, &MatmulEntry<QK4Kernel<false>, kKGemvNR, kKGemmMR, kKGemmNR>);
  set(DType::kQ5_K, &MatmulEntry<QK4Kernel<true>, kKGemvNR, kKGemmMR, kKGemmNR>);
  set(DType::kQ6_K, &MatmulEntry<Q6KKernel, kKGemvNR, kKGemmMR, kKGemmNR>);
}

}  // namespace vlmd::engine::kernels::VLMD_X86_NS
