// A convert_q8_0_sums row of any length (kernel_table.h) from a converter of whole 32-value
// blocks: the whole blocks in place, then the last, partial one from a zero-padded copy. Q8_0
// blocks are independent, so the result is the zero-padded row's conversion: the layout of a
// float matrix whose k is not a multiple of 32, packed with its last block padded
// (packed_int8.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels {
// Internal linkage: the including translation units are compiled with different ISA flags, and
// one linker-chosen copy of an instantiation must not run where its ISA is missing.
namespace {

// whole(x, y, sums, k): converts the k / 32 whole blocks of x (k a multiple of 32).
template <typename WholeBlocks>
inline void ConvertQ8_0SumsRow(const float* x, void* y, int32_t* sums, int64_t k,
                               WholeBlocks whole) {
  const int64_t whole_blocks = k / kQK8_0, tail = k - whole_blocks * kQK8_0;
  if (whole_blocks > 0) whole(x, y, sums, whole_blocks * kQK8_0);
  if (tail == 0) return;
  float padded[kQK8_0] = {};
  std::copy(x + whole_blocks * kQK8_0, x + k, padded);
  whole(padded, static_cast<BlockQ8_0*>(y) + whole_blocks, sums + whole_blocks, kQK8_0);
}

}  // namespace
}  // namespace vlmd::engine::kernels
