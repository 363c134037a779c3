// Row quantizers and dequantizers for the ggml block formats (layouts in quant_blocks.h).
//
// Two flavours of quantizer exist, because llama.cpp itself has two:
// - Weight (file) quantizers, QuantizeRow()/quant::QuantizeRowQ*: bit-exact with ggml's
//   reference quantizers quantize_row_*_ref (ggml/src/ggml-quants.c), which is what
//   llama-quantize writes without an importance matrix. Pinned reference:
//   https://github.com/ggml-org/llama.cpp/blob/3f545beccee69d9975f466ec7e45fd9aacd8ba90/ggml/src/ggml-quants.c
// - Activation quantizers, FindActivationQuantizeFn(): what ggml's CPU backend uses to convert
//   f32 activations before a quantized matmul on x86 (ggml-cpu/arch/x86/quants.c,
//   quantize_row_q8_0 / quantize_row_q8_1 with AVX: scale 127/amax and round-half-to-even;
//   quantize_row_q8_K is the reference one). Reproducing these is what makes vlmd's quantized
//   matmuls land on llama.cpp's numbers; they differ from the Q8_0/Q8_1 *_ref quantizers in the
//   rounding of ties and in the reciprocal (127/amax vs 1/(amax/127)).
//
// All functions are pure: thread-safe, no allocation, no global state.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/status.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine {

// Row converters: k values (a multiple of the type's block size) to/from k / block_size blocks.
// x and y must not overlap. No checks: callers validate (see QuantizeRow below).
using QuantizeRowFn = void (*)(const float* x, void* y, int64_t k);
using DequantizeRowFn = void (*)(const void* x, float* y, int64_t k);

// Weight quantizer of `type` (ggml *_ref semantics): F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q8_0,
// Q8_1, Q4_K, Q5_K, Q6_K, Q8_K; nullptr for any other type.
QuantizeRowFn FindQuantizeRowFn(DType type);
// Dequantizer of `type`: the set above plus Q5_1, IQ4_NL, Q2_K, Q3_K and IQ4_XS, which vlmd
// reads from llama.cpp's files but does not write; nullptr for any other type.
DequantizeRowFn FindDequantizeRowFn(DType type);
// Activation quantizer for an activation format (the KernelTable act_type of a weight type):
// Q8_0 and Q8_1 with ggml-cpu x86 semantics, Q8_K (= reference), F16, BF16, F32 (a copy);
// nullptr for any other type.
QuantizeRowFn FindActivationQuantizeFn(DType act_type);

// Checked forms. INVALID_ARGUMENT when k < 0, k is not a multiple of the block size, or a
// pointer is null while k > 0, and (QuantizeRow into a block format) when x holds an inf or NaN,
// which no block format can encode; UNIMPLEMENTED when the type has no (de)quantizer.
// y must hold RowBytes(type, k) bytes (QuantizeRow) or k floats (DequantizeRow).
Status QuantizeRow(DType type, const float* x, void* y, int64_t k);
Status DequantizeRow(DType type, const void* x, float* y, int64_t k);

// Whether `type` has a quantizer weighted by an importance matrix (Q4_0, Q4_K, Q5_K, Q6_K, as
// llama-quantize --imatrix; its Q4_1/Q5_0 weighted paths are not reproduced, and it ignores the
// importance for Q8_0 too).
bool QuantizeUsesImportance(DType type);
// QuantizeRow weighted by `importance` (k values: an importance matrix's mean x^2 per column) for
// the types above; `importance` nullptr, or another type: QuantizeRow. x is one whole row.
Status QuantizeRowWeighted(DType type, const float* x, void* y, int64_t k, const float* importance);

// Quantizes a row-major [n_rows, row_len] f32 matrix into `out`, which must hold
// n_rows * RowBytes(type, row_len) bytes; returns the number of bytes written. Row r lands at
// out + r * RowBytes(type, row_len), exactly as a GGUF tensor stores it. Single-threaded; a
// caller that wants threads quantizes disjoint row ranges with QuantizeRow.
// Errors as QuantizeRow, plus INVALID_ARGUMENT for n_rows < 0 and OUT_OF_RANGE on size overflow.
Result<uint64_t> QuantizeTensor(DType type, const float* src, int64_t n_rows, int64_t row_len,
                                void* out);

// Typed, unchecked per-format functions (k a multiple of the block size). Kernels and tests use
// these directly; the 32-element formats live in quantize_legacy.cpp, the k-quants in
// quantize_k.cpp.
namespace quant {

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t k);
void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t k);
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t k);
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t k);
void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t k);
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t k);
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t k);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t k);
// With an importance matrix's values for the row's k columns (mean x^2 per input column, see
// engine/gguf/imatrix.h): the error of each value weighed by it, as llama-quantize --imatrix
// does (ggml's quantize_row_q{4,5}_K_impl); importance nullptr: the functions above.
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t k, const float* importance);
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t k, const float* importance);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t k, const float* importance);
// Q4_0 with importance is ggml's quantize_row_q4_0_impl, whose weights use the mean x^2 of the
// whole row: x must be one whole row of k values.
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t k, const float* importance);
// Q8_K is only ever an activation format; this is ggml's quantize_row_q8_K_ref, except that an
// all-zero block also gets zero bsums (ggml leaves them unwritten).
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t k);

// Activation flavours (ggml-cpu x86): d = amax / 127 stored as f16, q = round_half_even(x * 127
// / amax) in [-127, 127]; Q8_1 also stores s = f16(d * sum(q)) with the f32 d.
void QuantizeRowQ8_0Act(const float* x, BlockQ8_0* y, int64_t k);
void QuantizeRowQ8_1Act(const float* x, BlockQ8_1* y, int64_t k);

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t k);
void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t k);
void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t k);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t k);
void DequantizeRowQ8_1(const BlockQ8_1* x, float* y, int64_t k);
void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t k);
void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t k);
void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t k);
void DequantizeRowQ8_K(const BlockQ8_K* x, float* y, int64_t k);
// Formats vlmd reads from files but does not write (dequantize_read_only.cpp).
void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t k);
void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t k);
void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t k);
void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t k);
void DequantizeRowIQ4_XS(const BlockIQ4_XS* x, float* y, int64_t k);
// The signed 6-bit scale (s - 32) of sub-block i (0..15) of a Q3_K block, and the signed level
// (-4..3) of its element e (0..255); the same for IQ4_XS's sub-block i (0..7). Inline: the
// reference dots call them per weight.
inline int Q3KScale(const BlockQ3_K& b, int i) {
  const int low = (b.scales[i % 8] >> (4 * (i / 8))) & 0xF;
  const int high = (b.scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}
inline int Q3KLevel(const BlockQ3_K& b, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
  return (b.hmask[l] >> (4 * h + j)) & 1 ? low : low - 4;
}
// The 32 unsigned 5-bit levels of a Q5_0 or Q5_1 block (its qs and qh) in element order: low
// nibbles of qs are elements 0-15, high ones 16-31, bit j of qh (u32 LE) is element j's fifth.
inline void Q5Levels(const uint8_t* qs, const uint8_t* qh, uint8_t* level) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    level[j] = static_cast<uint8_t>((qs[j] & 0xF) | (((bits >> j) & 1u) << 4));
    level[j + kQK4_0 / 2] = static_cast<uint8_t>((qs[j] >> 4) | (((bits >> (j + 16)) & 1u) << 4));
  }
}
// All 256 levels of a Q3_K block in element order (Q3KLevel of each, without its per-element
// index arithmetic).
inline void Q3KLevels(const BlockQ3_K& b, int8_t* level) {
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      const int bit = 1 << (4 * h + j);
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
        level[128 * h + 32 * j + l] = static_cast<int8_t>((b.hmask[l] & bit) ? low : low - 4);
      }
    }
  }
}
inline int IQ4XSScale(const BlockIQ4_XS& b, int i) {
  const int low = (b.scales_l[i / 2] >> (4 * (i % 2))) & 0xF;
  const int high = (b.scales_h >> (2 * i)) & 3;
  return (low | (high << 4)) - 32;
}

// The packed 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block: sub-blocks 0-3 keep
// them in the low 6 bits of bytes j and j + 4; sub-blocks 4-7 keep the low 4 bits in the nibbles
// of byte j + 4 and the high 2 bits in the top bits of bytes j - 4 (scale) and j (min).
inline void UnpackScaleMinK4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace quant
}  // namespace vlmd::engine
