// Integer-dot matmul tiles for the 32-element formats (Q4_0, Q4_1, Q5_0, Q8_0) against Q8_0/Q8_1
// activations, in 256-bit vectors. Compiled once per ISA (see simd_inl.h): with AVX512-VNNI the
// byte dot is one vpdpbusd, without it maddubs + madd.
//
// Numerics: each block's integer dot is exact in int32; it is converted to f32 (exact, |dot| <
// 2^24), scaled by d_w * d_a (two roundings) and accumulated in 8 f32 lanes, summed at the end.
// Signed weights use the offset trick: u8 = q + c, and the c * sum(a) term is subtracted by
// starting the int32 accumulator at -c * sum(a), computed once per activation block and reused
// by every weight row of the tile.
#pragma once

#include "engine/kernels/x86/simd_inl.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels::VLMD_X86_NS {

// -c * (sum of each 4-byte group of a), the correction for weights stored as q + c.
inline __m256i NegOffsetSum(__m256i a, int8_t c) {
  return _mm256_sub_epi32(_mm256_setzero_si256(),
                          DotU8S8(_mm256_setzero_si256(), _mm256_set1_epi8(c), a));
}

// Shared skeleton for 32-element weight blocks against Q8_0 activations. Format supplies
// Decode(block) -> u8 quants (q + c) and the offset c.
template <class Format>
struct Q8Act32Kernel {
  template <int MR, int NR>
  static void Tile(const MatmulArgs& p, int64_t m, int64_t n) {
    using WBlock = typename Format::Block;
    const int64_t nb = p.k / 32;
    const WBlock* w[NR];
    const BlockQ8_0* a[MR];
    for (int j = 0; j < NR; ++j) w[j] = reinterpret_cast<const WBlock*>(p.w + (n + j) * p.w_row_bytes);
    for (int i = 0; i < MR; ++i) a[i] = reinterpret_cast<const BlockQ8_0*>(p.a + (m + i) * p.a_row_bytes);
    __m256 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i av[MR], bias[MR];
      __m256 da[MR];
      for (int i = 0; i < MR; ++i) {
        av[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i][b].qs));
        da[i] = _mm256_set1_ps(HalfToFloat(a[i][b].d));
        if constexpr (Format::kOffset != 0) bias[i] = NegOffsetSum(av[i], Format::kOffset);
      }
      for (int j = 0; j < NR; ++j) {
        if constexpr (NR * MR <= 4) _mm_prefetch(reinterpret_cast<const char*>(&w[j][b + 8]), _MM_HINT_T0);
        const __m256 dw = _mm256_set1_ps(HalfToFloat(w[j][b].d));
        const __m256i q = Format::Decode(w[j][b]);
        for (int i = 0; i < MR; ++i) {
          __m256i dot;
          if constexpr (Format::kOffset != 0) {
            dot = DotU8S8(bias[i], q, av[i]);
          } else {
            dot = Format::SignedDot(q, av[i]);
          }
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, da[i]), acc[i][j]);
        }
      }
    }
    StoreTile<MR, NR>(p, m, n, acc);
  }
};

struct Q4_0Format {
  using Block = BlockQ4_0;
  static constexpr int8_t kOffset = 8;
  static __m256i Decode(const BlockQ4_0& x) { return ExpandNibbles(x.qs); }
};

struct Q5_0Format {
  using Block = BlockQ5_0;
  static constexpr int8_t kOffset = 16;
  static __m256i Decode(const BlockQ5_0& x) {
    const __m256i hi = _mm256_and_si256(BitsToBytes(LoadU32(x.qh)), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(ExpandNibbles(x.qs), hi);
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
// vpdpbusd does not saturate, so Q8_0 weights take the offset trick too: q + 128 fits a u8.
struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr int8_t kOffset = -128;  // the byte 0x80 read as u8 by the offset dot
  static __m256i Decode(const BlockQ8_0& x) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};
#else
// maddubs would saturate on (q + 128) * a, so the sign trick: |q| * (a * sign(q)), |q| <= 128.
struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr int8_t kOffset = 0;
  static __m256i Decode(const BlockQ8_0& x) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  }
  static __m256i SignedDot(__m256i q, __m256i a) {
    return DotU8S8(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(a, q));
  }
};
#endif

// Q4_1 x Q8_1: dot = d_w d_a sum(q a) + m_w s_a, where s_a = d_a sum(a) is stored in the block.
struct Q4_1Kernel {
  template <int MR, int NR>
  static void Tile(const MatmulArgs& p, int64_t m, int64_t n) {
    const int64_t nb = p.k / 32;
    const BlockQ4_1* w[NR];
    const BlockQ8_1* a[MR];
    for (int j = 0; j < NR; ++j) w[j] = reinterpret_cast<const BlockQ4_1*>(p.w + (n + j) * p.w_row_bytes);
    for (int i = 0; i < MR; ++i) a[i] = reinterpret_cast<const BlockQ8_1*>(p.a + (m + i) * p.a_row_bytes);
    __m256 acc[MR][NR];
    float mins[MR][NR] = {};
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i av[MR];
      __m256 da[MR];
      float sa[MR];
      for (int i = 0; i < MR; ++i) {
        av[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i][b].qs));
        da[i] = _mm256_set1_ps(HalfToFloat(a[i][b].d));
        sa[i] = HalfToFloat(a[i][b].s);
      }
      for (int j = 0; j < NR; ++j) {
        const __m256 dw = _mm256_set1_ps(HalfToFloat(w[j][b].d));
        const float mw = HalfToFloat(w[j][b].m);
        const __m256i q = ExpandNibbles(w[j][b].qs);
        for (int i = 0; i < MR; ++i) {
          const __m256i dot = DotU8S8(_mm256_setzero_si256(), q, av[i]);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, da[i]), acc[i][j]);
          mins[i][j] += mw * sa[i];
        }
      }
    }
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) p.out[(m + i) * p.out_stride + n + j] = HSum(acc[i][j]) + mins[i][j];
    }
  }
};

// Tile shapes: AVX2 has 16 vector registers, AVX-512VL code 32 (accumulators + activations).
#if defined(__AVX512VL__)
inline constexpr int kQGemmMR = 4, kQGemmNR = 3;
#else
inline constexpr int kQGemmMR = 3, kQGemmNR = 2;
#endif
inline constexpr int kQGemvNR = 4;

inline void FillQuant32Matmul(KernelTable* t) {
  auto set = [t](DType w, DType act, MatmulFn fn) {
    t->matmul[static_cast<int>(w)] = fn;
    t->act_type[static_cast<int>(w)] = act;
  };
  set(DType::kQ4_0, DType::kQ8_0,
      &MatmulEntry<Q8Act32Kernel<Q4_0Format>, kQGemvNR, kQGemmMR, kQGemmNR>);
  set(DType::kQ5_0, DType::kQ8_0,
      &MatmulEntry<Q8Act32Kernel<Q5_0Format>, kQGemvNR, kQGemmMR, kQGemmNR>);
  set(DType::kQ8_0, DType::kQ8_0,
      &MatmulEntry<Q8Act32Kernel<Q8_0Format>, kQGemvNR, kQGemmMR, kQGemmNR>);
  set(DType::kQ4_1, DType::kQ8_1, &MatmulEntry<Q4_1Kernel, kQGemvNR, kQGemmMR, kQGemmNR>);
}

}  // namespace vlmd::engine::kernels::VLMD_X86_NS
