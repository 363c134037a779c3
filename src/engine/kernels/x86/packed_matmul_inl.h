// What the x86 packed int8 matmul kernels share (packed_matmul_avx2_inl.h, avx512vnni/): the
// GEMV prefetch, and (packed_format_inl.h) the dispatch on the matrix's packed format.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

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

}  // namespace
}  // namespace vlmd::engine::kernels
