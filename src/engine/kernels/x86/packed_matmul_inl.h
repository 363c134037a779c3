// What the x86 packed int8 matmul kernels share (packed_matmul_avx2_inl.h, avx512vnni/): the
// GEMV prefetch, the GEMM's cache of unpacked 4-bit panels, and (packed_format_inl.h) the
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

// A GEMM call of this many rows or more (with PackedMatmulArgs::a_scales) reads its 4-bit quants
// unpacked to bytes (UnpackCache) and the activation rows' f32 scales and offset terms prepared by
// ops::MatMul, instead of splitting nibbles and converting scales in every tile, on the ports the
// integer products need. Measured per table in bench/RESULTS.md, session 33.
inline constexpr int64_t kGemmMinRows = 16;

// Bytes of one panel's blocks unpacked: per 32-element block the kQ8 byte order (k-quad q of the
// 16 columns at q * 64, 4 bytes per column), one byte per 4-bit quant.
inline constexpr size_t kUnpackedBlockBytes = 512;

// Writes panels [p0, p1) of a kQ4 / kQ4K matrix, every block, to dst: panel p's blocks one after
// the other from dst + (p - p0) * blocks * kUnpackedBlockBytes. Each table's unit has its own
// (its vector width); nibble vector c's low halves are k-quad 2c, its high halves 2c + 1.
using UnpackNibblesFn = void (*)(const PackedMatrix& w, int64_t p0, int64_t p1, uint8_t* dst);

// Per thread: the panels it unpacked last, kept for its next call over the same panels (ops::
// MatMul's tasks take a panel block's row blocks one after the other, so a thread often gets the
// same panels again). Keyed by the matrix's serial, never by its address.
class UnpackCache {
 public:
  UnpackCache() = default;
  UnpackCache(const UnpackCache&) = delete;
  UnpackCache& operator=(const UnpackCache&) = delete;
  ~UnpackCache() { std::free(data_); }
  // w's panels [p0, p1) as `unpack` writes them; nullptr when they cannot be allocated.
  const uint8_t* Get(const PackedMatrix& w, int64_t p0, int64_t p1, UnpackNibblesFn unpack) {
    if (w.serial() == serial_ && p0 == p0_ && p1 == p1_) return data_;
    const size_t bytes = static_cast<size_t>((p1 - p0) * w.blocks()) * kUnpackedBlockBytes;
    if (bytes > size_) {
      std::free(data_);
      size_ = (bytes + 4095) / 4096 * 4096;
      data_ = static_cast<uint8_t*>(std::aligned_alloc(64, size_));
      if (data_ == nullptr) {
        size_ = 0;
        serial_ = 0;
        return nullptr;
      }
    }
    unpack(w, p0, p1, data_);
    serial_ = w.serial();
    p0_ = p0;
    p1_ = p1;
    return data_;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint64_t serial_ = 0;  // 0: none (serials start at 1)
  int64_t p0_ = 0, p1_ = 0;
};

}  // namespace
}  // namespace vlmd::engine::kernels
