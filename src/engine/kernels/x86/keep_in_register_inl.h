// KeepInRegister: pins a running integer sum of the 256-bit kernels in a register. Included by
// translation units of different ISA flags, so it has internal linkage (one copy per unit).
#pragma once

#include <immintrin.h>

namespace vlmd::engine::kernels {
namespace {

// An empty asm that takes v in a register and may change it: the compiler can neither
// reassociate a sum across it nor move the sum's terms past it. GCC otherwise rewrote chains
// of integer adds (which it may reorder) into trees over all their terms, which did not fit the
// 16 registers of AVX2 and spilled. 1 thread, 512 x 2048 x 2048, with / without: q4_0 packed GEMM
// (TileNibbles) 211-215 / 131-146 GFLOP/s, kQ8 (TileSplit) 114-119 / 74-76 (bench/RESULTS.md,
// session 35); the exact precision's q4_K tiles 111-124 / 79-82 with their new loop order
// (session 36).
inline void KeepInRegister(__m256i& v) {
#if defined(__AVX512VL__)
  asm("" : "+v"(v));  // any of the 32 registers
#else
  asm("" : "+x"(v));
#endif
}

}  // namespace
}  // namespace vlmd::engine::kernels
