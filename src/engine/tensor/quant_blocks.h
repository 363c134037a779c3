// ggml-compatible quantization block layouts (byte-for-byte what GGUF files store).
// Scales stored as IEEE half are kept as raw uint16_t bits; see fp16.h for conversion.
#pragma once

#include <cstdint>

namespace vlmd::engine {

inline constexpr int kQK4_0 = 32;  // elements per block, 32-element formats
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;  // elements per super-block, k-quants
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q4_K/Q5_K

// Q4_0: x = d * (q - 8), q in [0, 15]; qs[j] holds element j (low nibble) and j + 16 (high).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
// Q4_1: x = d * q + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_0 / 2];
};
// Q5_0: x = d * (q - 16); low 4 bits as in Q4_0, bit 4 of element j in bit j of qh (u32 LE).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK4_0 / 2];
};
// Q5_1: x = d * q + m, q in [0, 31]; bits as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK4_0 / 2];
};
// IQ4_NL: x = d * kIq4NlValues[q], q in [0, 15]; nibbles as in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
// Q8_0: x = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
// Q8_1: as Q8_0 plus s = d * sum(q) (activation format of Q4_1).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_0];
};
// Q4_K: 8 sub-blocks of 32; x = d * sc_i * q - dmin * m_i, with 6-bit sc_i, m_i packed in scales.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
// Q5_K: as Q4_K plus the fifth bit of each quant in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// Q6_K: 16 sub-blocks of 16; x = d * scales_i * (q - 32), q 6-bit (4 low bits in ql, 2 in qh).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// Q2_K: 16 sub-blocks of 16; x = d * (scales_i & 15) * q - dmin * (scales_i >> 4), q 2-bit.
// Element 128 h + 32 j + l (half h, j = 0..3, l = 0..31) is bits 2j..2j+1 of qs[32 h + l].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// Q3_K: 16 sub-blocks of 16; x = d * (s_i - 32) * (q - 4 * !hbit), q 2-bit as in Q2_K; the high
// bit of element 128 h + 32 j + l is bit 4 h + j of hmask[l]; s_i 6-bit: its low 4 bits in
// scales[i % 8] >> (4 * (i / 8)), its high 2 in scales[8 + i % 4] >> (2 * (i / 4)).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
// IQ4_XS: 8 sub-blocks of 32; x = d * (s_i - 32) * kIq4NlValues[q], s_i 6-bit (low nibble in
// scales_l, high 2 bits in scales_h), nibbles of each sub-block as in Q4_0.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
// The 16 levels of IQ4_NL and IQ4_XS (a non-uniform grid, denser near zero).
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// Q8_K: activation format of the k-quants; bsums[i] = sum of qs[16 i .. 16 i + 15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace vlmd::engine
