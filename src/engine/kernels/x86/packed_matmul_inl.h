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
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* s = w.scales(p, 0);
    const uint16_t* mn = mins != nullptr ? w.mins(p, 0) : nullptr;
    for (int64_t b = 0; b < nb; ++b, s += stride, scales += kPanelCols) {
      for (int h = 0; h < kPanelCols; h += 8) {
        _mm256_store_ps(scales + h,
                        _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(s + h))));
      }
      if (mn == nullptr) continue;
      for (int h = 0; h < kPanelCols; h += 8) {
        _mm256_store_ps(mins + h,
                        _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mn + h))));
      }
      mn += stride;
      mins += kPanelCols;
    }
  }
}

// Writes, for panels [p0, p1) of a kQ8 matrix and every block, each column's -128 * sum(w) (w =
// the stored byte - 128, the signed weight) as 16 int32 per block, in ConvertPanelScales'
// order: the correction of the AVX2 GEMM that multiplies the signed weights by the activations
// + 128 (x86/packed_matmul_avx2_inl.h).
inline void SignedWeightBiases(const PackedMatrix& w, int64_t p0, int64_t p1, int32_t* dst) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i bytes_offset = _mm256_set1_epi32(32 * 128);  // sum(u) - sum(w) per column
  const int64_t nb = w.blocks();
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* q = w.qs(p, 0);
    for (int64_t b = 0; b < nb; ++b, q += w.qs_block_stride(), dst += kPanelCols) {
      for (int h = 0; h < 2; ++h) {  // columns 8h .. 8h + 7
        __m256i sum_u = _mm256_setzero_si256();
        for (int k4 = 0; k4 < 8; ++k4) {
          const __m256i u =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k4 * 64 + h * 32));
          sum_u = _mm256_add_epi32(sum_u,
                                   _mm256_madd_epi16(_mm256_maddubs_epi16(u, ones8), ones16));
        }
        const __m256i sum_w = _mm256_sub_epi32(sum_u, bytes_offset);
        const __m256i bias = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), sum_w), 7);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + h * 8), bias);
      }
    }
  }
}

// Writes panels [p0, p1) of a kQ8 matrix, every block, to dst as the signed weights (the stored
// bytes - 128), in UnpackNibbles' order (the kQ8 layout, panel after panel).
inline void SignedWeights(const PackedMatrix& w, int64_t p0, int64_t p1, uint8_t* dst) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const int64_t nb = w.blocks();
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* src = w.qs(p, 0);
    for (int64_t b = 0; b < nb; ++b, src += w.qs_block_stride(), dst += kUnpackedBlockBytes) {
      for (size_t i = 0; i < kUnpackedBlockBytes; i += 32) {
        const __m256i u = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + i));
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_xor_si256(u, flip));
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
  // 4-bit formats: UnpackNibbles' layout; kQ8 with the weight biases: SignedWeights'.
  const uint8_t* unpacked = nullptr;
  const float* scales = nullptr;      // ConvertPanelScales' layout
  const float* mins = nullptr;        // kQ4K only
  const int32_t* weight_biases = nullptr;  // kQ8, when asked for: SignedWeightBiases' layout
  // With the weight biases: rows [m0, m1) of the activations + 128, each block's bytes split
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
  // w's panels [p0, p1) prepared into *prep (the fields of w's format; a kQ8 matrix's weight
  // biases when `weight_biases`); false when they are too many or the memory cannot be
  // allocated.
  bool Get(const PackedMatrix& w, int64_t p0, int64_t p1, bool weight_biases, GemmPrep* prep) {
    const size_t units = static_cast<size_t>((p1 - p0) * w.blocks());
    const bool nibbles = w.format() != PackedFormat::kQ8;
    const bool mins = w.format() == PackedFormat::kQ4K;
    const bool biases = weight_biases && w.format() == PackedFormat::kQ8;
    const size_t unpacked_bytes = nibbles || biases ? units * kUnpackedBlockBytes : 0;
    const size_t scale_bytes = units * kPanelCols * sizeof(float);  // also the biases' size
    const size_t bytes = unpacked_bytes + scale_bytes * (mins || biases ? 2 : 1);
    // (a cache filled without the biases is refilled when they are asked for)
    if (w.serial() != serial_ || p0 != p0_ || p1 != p1_ || biases != biases_) {
      if (bytes > kMaxBytes) return false;
      data_ = buffer_.Get(bytes);
      if (data_ == nullptr) {
        serial_ = 0;
        return false;
      }
      if (nibbles) UnpackNibbles(w, p0, p1, data_);
      if (biases) SignedWeights(w, p0, p1, data_);
      ConvertPanelScales(w, p0, p1, reinterpret_cast<float*>(data_ + unpacked_bytes),
                         mins ? reinterpret_cast<float*>(data_ + unpacked_bytes + scale_bytes)
                              : nullptr);
      if (biases) {
        SignedWeightBiases(w, p0, p1,
                           reinterpret_cast<int32_t*>(data_ + unpacked_bytes + scale_bytes));
      }
      serial_ = w.serial();
      p0_ = p0;
      p1_ = p1;
      biases_ = biases;
    }
    uint8_t* second = data_ + unpacked_bytes + scale_bytes;  // mins or biases
    prep->p0 = p0;
    prep->unpacked = nibbles || biases ? data_ : nullptr;
    prep->scales = reinterpret_cast<const float*>(data_ + unpacked_bytes);
    prep->mins = mins ? reinterpret_cast<const float*>(second) : nullptr;
    prep->weight_biases = biases ? reinterpret_cast<const int32_t*>(second) : nullptr;
    return true;
  }

 private:
  AlignedBuffer buffer_;
  uint8_t* data_ = nullptr;  // buffer_'s
  uint64_t serial_ = 0;  // 0: none (serials start at 1)
  int64_t p0_ = 0, p1_ = 0;
  bool biases_ = false;
};

// Fills *prep for a call over rows [m0, m1) and panels [p0, p1) when it takes the prepared
// operands: kGemmPrepMinRows rows or more, the args' a_scales and a_offsets set, and the panels
// prepared in this thread's cache (with a kQ8 matrix's weight biases when `weight_biases`).
// False: the caller runs the tiles that convert per tile.
inline bool PrepareGemm(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                        int64_t p1, GemmPrep* prep, bool weight_biases = false) {
  if (m1 - m0 < kGemmPrepMinRows || args.a_scales == nullptr || args.a_offsets == nullptr) {
    return false;
  }
  thread_local GemmPrepCache cache;
  if (!cache.Get(*args.w, p0, p1, weight_biases, prep)) return false;
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
