// What the x86 packed int8 matmul kernels share (packed_matmul_avx2_inl.h, avx512vnni/): the
// GEMV prefetch, the GEMM's per-thread cache of prepared panels, and (packed_format_inl.h) the
// dispatch on the matrix's packed format.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/kernels/packed_format_inl.h"
#include "engine/kernels/packed_int8.h"

namespace vlmd::engine::kernels {
// Internal linkage: the including translation units are compiled with different ISA flags.
namespace {

// GEMV tiles prefetch each panel's weights some blocks ahead: a decode step's matrices are short
// (0.2-1 MB at SmolLM2-135M's width), and the hardware prefetchers were still ramping up when a
// range ended (q4_0 decode ~500 -> ~545 tok/s on 2 threads). A kQ4 group's stream is prefetched
// PackedMatmulArgs::gemv_prefetch_blocks_q4 blocks ahead (1 KB each; the machine's choice, see
// KernelTable), a kQ8 panel one block (512 bytes) ahead, which measured best (2 threads,
// SmolLM2-135M, Intel AMX machine; the AVX2 kernel uses the same distances).
inline constexpr int64_t kPrefetchBlocksQ8 = 1;

// Prefetches the line `ahead` bytes past p. The address is formed as an integer: the last blocks
// prefetch past the arrays, harmless for a prefetch but not a pointer C++ lets us form.
inline void PrefetchAhead(const void* p, size_t ahead) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + ahead), _MM_HINT_T0);
}

// Bytes of one panel's blocks unpacked: per 32-element block the kQ8 byte order (k-quad q of the
// 16 columns at q * 64, 4 bytes per column), one byte per 4-bit quant.
inline constexpr size_t kUnpackedBlockBytes = 512;
static_assert(kUnpackedBlockBytes == QsBytesPerBlock(PackedFormat::kQ8));

// Writes panels [p0, p1) of a kQ4 / kQ4K matrix, every block, to dst: panel p's blocks one after
// the other from dst + (p - p0) * blocks * kUnpackedBlockBytes; nibble vector c's low halves are
// k-quad 2c, its high halves 2c + 1. On 256-bit vectors, which every x86 table including this
// header has (the unpacked panels are cached, so the AVX-512 unit does not need its own).
inline void UnpackNibbles(const PackedMatrix& w, int64_t p0, int64_t p1, uint8_t* dst) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const int64_t nb = w.blocks();
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* src = w.qs(p, 0);
    for (int64_t b = 0; b < nb; ++b, src += w.qs_block_stride(), dst += kUnpackedBlockBytes) {
      for (int h = 0; h < 8; ++h) {  // the 32-byte halves of the 4 nibble vectors
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + h * 32));
        uint8_t* out = dst + (h / 2) * 128 + (h % 2) * 32;
        _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_and_si256(raw, low4));
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64),
                           _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
      }
    }
  }
}

// Writes the block scales (and kQ4K's mins) of panels [p0, p1), every block, to `scales` (and
// `mins`) as f32: panel p's blocks one after the other from (p - p0) * blocks * kPanelCols, 16
// values per block. f16 -> f32 is exact.
inline void ConvertPanelScales(const PackedMatrix& w, int64_t p0, int64_t p1, float* scales,
                               float* mins) {
  const int64_t nb = w.blocks();
  const int64_t stride = w.scale_block_stride();
  // One panel block's 16 f16 values to f32.
  auto convert = [](const uint16_t* src, float* dst) {
    for (int h = 0; h < kPanelCols; h += 8) {
      _mm256_store_ps(dst + h,
                      _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(src + h))));
    }
  };
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* s = w.scales(p, 0);
    const uint16_t* mn = mins != nullptr ? w.mins(p, 0) : nullptr;
    for (int64_t b = 0; b < nb; ++b, s += stride, scales += kPanelCols) {
      convert(s, scales);
      if (mn == nullptr) continue;
      convert(mn, mins);
      mn += stride;
      mins += kPanelCols;
    }
  }
}

// The AVX2 kQ8 GEMM's weights (TileSplit, x86/packed_matmul_avx2_inl.h: it multiplies the
// signed weights by the activations + 128): for panels [p0, p1), every block, the signed weights
// w = the stored bytes - 128 to `weights` in UnpackNibbles' order (the kQ8 layout, panel after
// panel), and each column's -128 * sum(w) to `biases` as 16 int32 per block, in
// ConvertPanelScales' order.
inline void SignedWeightsAndBiases(const PackedMatrix& w, int64_t p0, int64_t p1,
                                   uint8_t* weights, int32_t* biases) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const int64_t nb = w.blocks();
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* src = w.qs(p, 0);
    for (int64_t b = 0; b < nb;
         ++b, src += w.qs_block_stride(), weights += kUnpackedBlockBytes, biases += kPanelCols) {
      __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};  // columns 0-7, 8-15
      for (size_t i = 0; i < kUnpackedBlockBytes; i += 32) {
        const __m256i ws = _mm256_xor_si256(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(src + i)), flip);
        _mm256_store_si256(reinterpret_cast<__m256i*>(weights + i), ws);
        // 1 x w summed in pairs, then the pairs: each int32 lane is one column's 4 weights.
        const __m256i quad = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, ws), ones16);
        sum[(i / 32) % 2] = _mm256_add_epi32(sum[(i / 32) % 2], quad);
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i bias = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), sum[h]), 7);
        _mm256_store_si256(reinterpret_cast<__m256i*>(biases + h * 8), bias);
      }
    }
  }
}

// What a GEMM call's tiles (kGemm) read instead of converting per tile, on the ports the integer
// products need: a 4-bit matrix's quants unpacked to bytes (a nibble split per weight vector per
// tile otherwise), the panels' block scales (and kQ4K's mins) as f32 (a vcvtph2ps per panel per
// block per row tile otherwise), and PackedMatmulArgs::a_scales / a_offsets (an f16 conversion
// and a broadcast per row per block otherwise); without VNNI a kQ8 matrix's signed weights and
// per-column weight sums, with the activations split into nibbles (TileSplit,
// x86/packed_matmul_avx2_inl.h). Measured per table in bench/RESULTS.md, sessions 33 and 35.
// Each weight array is indexed from panel p0: panel p, block b at ((p - p0) * blocks + b) times
// the per-block size (kUnpackedBlockBytes bytes, or kPanelCols floats or int32).
struct GemmPrep {
  int64_t p0 = 0;
  // 4-bit formats: UnpackNibbles' layout; kQ8 with split_q8: SignedWeightsAndBiases'.
  const uint8_t* unpacked = nullptr;
  const float* scales = nullptr;      // ConvertPanelScales' layout (not kQ8Col)
  const float* mins = nullptr;        // kQ4K only
  const int32_t* weight_biases = nullptr;  // kQ8 with split_q8: SignedWeightsAndBiases'
  // With split_q8 (kQ8): rows [m0, m1) of the activations + 128, each block's bytes split
  // into 32 low then 32 high nibbles; row m, block b at a_split + ((m - m0) * blocks + b) * 64.
  int64_t m0 = 0;
  const int8_t* a_split = nullptr;

  // Where panel p's first block is in `unpacked` (bytes) and in the per-column arrays (values),
  // for a matrix of nb blocks.
  size_t UnpackedOffset(int64_t p, int64_t nb) const {
    return static_cast<size_t>((p - p0) * nb) * kUnpackedBlockBytes;
  }
  size_t ColumnOffset(int64_t p, int64_t nb) const {
    return static_cast<size_t>((p - p0) * nb) * kPanelCols;
  }
};

// Rows [m0, m1) of the args' activations as GemmPrep::a_split lays them out, to dst.
inline void SplitActivations(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int8_t* dst) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const int64_t nb = args.w->blocks();
  for (int64_t m = m0; m < m1; ++m) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(args.a + m * args.a_row_bytes);
    for (int64_t b = 0; b < nb; ++b, dst += 64) {
      const __m256i x = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs)), flip);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst), _mm256_and_si256(x, low4));
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32),
                         _mm256_and_si256(_mm256_srli_epi16(x, 4), low4));
    }
  }
}

// A 64-byte-aligned buffer that grows to the largest size asked for.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }
  // At least `bytes` bytes (the contents of a grown buffer are lost); nullptr when they cannot
  // be allocated.
  uint8_t* Get(size_t bytes) {
    if (bytes > size_) {
      std::free(data_);
      size_ = (bytes + 4095) / 4096 * 4096;
      data_ = static_cast<uint8_t*>(std::aligned_alloc(64, size_));
      if (data_ == nullptr) size_ = 0;
    }
    return data_;
  }
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Per thread: the prepared panels of its last GEMM call, kept for its next call over the same
// panels (ops::MatMul's tasks take a panel block's row blocks one after the other, so a thread
// often gets the same panels again). Keyed by the matrix's serial, never by its address.
class GemmPrepCache {
 public:
  GemmPrepCache() = default;
  GemmPrepCache(const GemmPrepCache&) = delete;
  GemmPrepCache& operator=(const GemmPrepCache&) = delete;
  // A call's panels needing more than this (ops::MatMul's GEMM tasks take 6 panels: 1.6-1.7 MB
  // of a 4-bit matrix at k = 14336) are not prepared: the caller runs the tiles that convert
  // per tile.
  static constexpr size_t kMaxBytes = size_t{8} << 20;
  // w's panels [p0, p1) prepared into *prep (the fields of w's format; for a kQ8 matrix and
  // `split_q8`, the signed weights and their biases); false when they are too many or the memory
  // cannot be allocated.
  bool Get(const PackedMatrix& w, int64_t p0, int64_t p1, bool split_q8, GemmPrep* prep) {
    const size_t units = static_cast<size_t>((p1 - p0) * w.blocks());
    const bool nibbles = HasNibbles(w.format());
    const bool mins = w.format() == PackedFormat::kQ4K;
    const bool block_scales = w.format() != PackedFormat::kQ8Col;  // kQ8Col's are f32 already
    const bool signed_q8 = split_q8 && !nibbles;
    // Layout: the bytes (unpacked quants or signed weights), the f32 scales, then the mins or
    // the biases (as many values as the scales would be).
    const size_t byte_bytes = nibbles || signed_q8 ? units * kUnpackedBlockBytes : 0;
    const size_t scale_bytes = units * kPanelCols * sizeof(float);
    const size_t bytes =
        byte_bytes + (block_scales ? scale_bytes : 0) + (mins || signed_q8 ? scale_bytes : 0);
    if (bytes == 0) {  // kQ8Col on VNNI: nothing to prepare
      *prep = GemmPrep{};
      prep->p0 = p0;
      return true;
    }
    // (a cache filled without the signed weights is refilled when they are asked for)
    if (w.serial() != serial_ || p0 != p0_ || p1 != p1_ || signed_q8 != signed_q8_) {
      if (bytes > kMaxBytes) return false;
      uint8_t* data = buffer_.Get(bytes);
      if (data == nullptr) {
        serial_ = 0;
        return false;
      }
      uint8_t* second = data + byte_bytes + (block_scales ? scale_bytes : 0);
      if (nibbles) UnpackNibbles(w, p0, p1, data);
      if (signed_q8) SignedWeightsAndBiases(w, p0, p1, data, reinterpret_cast<int32_t*>(second));
      if (block_scales) {
        ConvertPanelScales(w, p0, p1, reinterpret_cast<float*>(data + byte_bytes),
                           mins ? reinterpret_cast<float*>(second) : nullptr);
      }
      serial_ = w.serial();
      p0_ = p0;
      p1_ = p1;
      signed_q8_ = signed_q8;
    }
    const uint8_t* data = buffer_.data();
    const uint8_t* second = data + byte_bytes + (block_scales ? scale_bytes : 0);
    prep->p0 = p0;
    prep->unpacked = nibbles || signed_q8 ? data : nullptr;
    prep->scales = block_scales ? reinterpret_cast<const float*>(data + byte_bytes) : nullptr;
    prep->mins = mins ? reinterpret_cast<const float*>(second) : nullptr;
    prep->weight_biases = signed_q8 ? reinterpret_cast<const int32_t*>(second) : nullptr;
    return true;
  }

 private:
  AlignedBuffer buffer_;
  uint64_t serial_ = 0;  // 0: none (serials start at 1)
  int64_t p0_ = 0, p1_ = 0;
  bool signed_q8_ = false;
};

// Fills *prep for a call over rows [m0, m1) and panels [p0, p1) when it takes the prepared
// operands: kGemmPrepMinRows rows or more, the args' a_scales and a_offsets set, and the panels
// prepared in this thread's cache; with `split_q8` a kQ8 matrix also gets TileSplit's operands
// (the signed weights, their biases, and the activations split into nibbles). False: the caller
// runs the tiles that convert per tile.
inline bool PrepareGemm(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                        int64_t p1, GemmPrep* prep, bool split_q8 = false) {
  if (m1 - m0 < kGemmPrepMinRows || args.a_scales == nullptr || args.a_offsets == nullptr) {
    return false;
  }
  thread_local GemmPrepCache cache;
  if (!cache.Get(*args.w, p0, p1, split_q8, prep)) return false;
  if (prep->weight_biases == nullptr) return true;
  thread_local AlignedBuffer split;
  const auto bytes = static_cast<size_t>((m1 - m0) * args.w->blocks() * 64);
  auto* dst = reinterpret_cast<int8_t*>(split.Get(bytes));
  if (dst == nullptr) return false;
  SplitActivations(args, m0, m1, dst);
  prep->m0 = m0;
  prep->a_split = dst;
  return true;
}

}  // namespace
}  // namespace vlmd::engine::kernels
