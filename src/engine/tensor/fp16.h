// Scalar conversions between f32 and the 16-bit float formats GGUF stores: IEEE binary16 (F16)
// and bfloat16 (BF16). Portable integer code (the baseline ISA has no F16C); inline so that
// reference kernels and quantizers can use them in inner loops.
//
// Rounding contract (tests/tensor/fp16_test.cpp checks it exhaustively):
// - F32ToF16: round to nearest, ties to even, for every finite input, including results in the
//   f16 subnormal range; overflow gives +-inf. This is bit-identical to x86 F16C (VCVTPS2PH with
//   imm 0) and to ggml's portable GGML_FP32_TO_FP16 for all non-NaN inputs. A NaN stays a NaN
//   with its sign, the quiet bit set and the top 9 payload bits kept (the F16C rule; ggml's
//   portable code instead returns the canonical 0x7E00 | sign, which F16C also gives for the
//   canonical f32 NaN 0x7FC00000).
// - F16ToF32 and BF16ToF32 are exact (every 16-bit pattern, NaN payloads and sNaN included).
// - F32ToBF16: round to nearest, ties to even (ggml_compute_fp32_to_bf16); a NaN keeps its sign
//   and top payload bits and is forced quiet.
#pragma once

#include <bit>
#include <cstdint>

namespace vlmd::engine {

// Exact: binary16 -> binary32.
inline float F16ToF32(uint16_t h) {
  // Move exponent+mantissa into f32 position; the exponent is then rebiased by (127 - 15).
  uint32_t bits = static_cast<uint32_t>(h & 0x7FFFu) << 13;
  const uint32_t exp = bits & 0x0F800000u;  // the 5 exponent bits, now at 23..27
  bits += (127u - 15u) << 23;
  if (exp == 0x0F800000u) {
    bits += (128u - 16u) << 23;  // inf / NaN: exponent all ones in f32 too, payload kept
  } else if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24. Build 2^-14 * (1 + mant/1024) and subtract
    // 2^-14; the subtraction is exact (Sterbenz), so no rounding happens.
    bits += 1u << 23;
    bits = std::bit_cast<uint32_t>(std::bit_cast<float>(bits) - std::bit_cast<float>(113u << 23));
  }
  bits |= static_cast<uint32_t>(h & 0x8000u) << 16;
  return std::bit_cast<float>(bits);
}

// binary32 -> binary16, round to nearest even (see the contract above).
inline uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) {  // inf or NaN
    if (a == 0x7F800000u) return sign | 0x7C00u;
    return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  }
  // 65520 = 65504 + half an ulp: the tie goes to the even neighbour, which is 2^16 = inf.
  if (a >= 0x477FF000u) return sign | 0x7C00u;
  if (a >= 0x38800000u) {  // >= 2^-14: normal f16
    // Rebias, then add 0xFFF + lsb so that the carry out of the 13 dropped bits rounds to even;
    // a carry into the exponent field is the correct result (next binade).
    const uint32_t r = a - ((127u - 15u) << 23);
    return static_cast<uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  // f16 subnormal range: result = round(a / 2^-24). At or below 2^-25 (half of the smallest
  // subnormal, a tie that goes to even = 0) the result is zero.
  if (a <= 0x33000000u) return sign;
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;  // value = mant * 2^(e - 150)
  const uint32_t shift = 126u - (a >> 23);            // 14..24 for e in [102, 112]
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t up = (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (q + up));  // q + up == 0x400 is the smallest normal
}

// Exact: bfloat16 -> binary32.
inline float BF16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// binary32 -> bfloat16, round to nearest even; NaN forced quiet (bit 6 of the bf16 mantissa).
inline uint16_t F32ToBF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// Row helpers (n elements; x and y must not overlap).
void F16ToF32Row(const uint16_t* x, float* y, int64_t n);
void F32ToF16Row(const float* x, uint16_t* y, int64_t n);
void BF16ToF32Row(const uint16_t* x, float* y, int64_t n);
void F32ToBF16Row(const float* x, uint16_t* y, int64_t n);

}  // namespace vlmd::engine
