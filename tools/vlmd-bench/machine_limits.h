// Measures the limits of the machine the benchmark runs on, in the same run as the thing it
// compares: read bandwidth for a given working-set size, and the peak f32 FMA rate.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"

namespace vlmd::bench {

// Sustained read bandwidth in GB/s (1e9 bytes/s) for a buffer of `bytes` read repeatedly by all
// threads of `pool` (each thread its own slice), as a matmul over weights of that size reads them.
// 0 when the buffer cannot be allocated.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes);

// The vector unit a probe runs on: that of the kernel table being measured (VLMD_FORCE_ISA=avx2
// on an AVX-512 machine measures the AVX2 limits), capped by what this CPU has.
enum class ProbeUnit { kSse, kAvx2, kAvxVnni, kAvx512, kAvx512Vnni };
ProbeUnit ProbeUnitFor(engine::kernels::Isa kernel_isa);
// "sse", "avx2", "avxvnni", "avx512", "avx512vnni"
const char* ProbeUnitName(ProbeUnit unit);

// Peak f32 FMA throughput in GFLOP/s with all threads of `pool` (independent accumulator chains
// in `unit`: AVX-512, AVX2+FMA, or SSE mul+add).
double MeasureFmaPeak(ThreadPool& pool, ProbeUnit unit);

// Peak int8 multiply-add rate (u8 x s8 products summed into int32, 1e9/s) with all threads of
// `pool`, on the instructions the packed int8 kernels of `unit` are built on: independent
// vpdpbusd zmm chains (AVX512-VNNI), vpdpbusd ymm chains (AVX-VNNI), or vpmaddubsw + vpmaddwd +
// vpaddd chains (AVX2 and plain AVX-512, whose packed kernel is the AVX2 one). The ceiling of a
// GEMV whose weights are cheap to read (a working set in L2): no kernel can multiply faster than
// this. 0 for SSE.
double MeasureInt8DotPeak(ThreadPool& pool, ProbeUnit unit);
const char* Int8DotPeakInstructions(ProbeUnit unit);  // what MeasureInt8DotPeak ran, for the table
const char* Int4DotPeakInstructions(ProbeUnit unit);  // what MeasureInt4DotPeak ran

// Peak rate (1e9 weights/s, all threads of `pool`) at which 4-bit weights packed two to a byte
// can be multiplied by int8 activations with the least work every 4-bit kernel of `unit` does,
// from L1, without the per-block scaling. VNNI: per 64 bytes two nibble masks and two vpdpbusd
// (half the int8 MAC peak at best: the masks use the same two vector ports). AVX2: per 32
// bytes two masks, a shift and two vpmaddubsw summed in int16; AVX-VNNI the same with two
// vpdpbusd into int32. 0 for SSE.
double MeasureInt4DotPeak(ThreadPool& pool, ProbeUnit unit);

// Median of `reps` timings (seconds) of fn(), after one warm-up call.
template <typename Fn>
double MedianSeconds(int reps, Fn&& fn);

}  // namespace vlmd::bench

#include "machine_limits_inl.h"
