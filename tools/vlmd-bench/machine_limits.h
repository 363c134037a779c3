// Measures the limits of the machine the benchmark runs on, in the same run as the thing it
// compares: read bandwidth for a given working-set size, and the peak f32 FMA rate.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace vlmd::bench {

// Sustained read bandwidth in GB/s (1e9 bytes/s) for a buffer of `bytes` read repeatedly by all
// threads of `pool` (each thread its own slice), as a matmul over weights of that size reads them.
// 0 when the buffer cannot be allocated.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes);

// Peak f32 FMA throughput in GFLOP/s with all threads of `pool` (independent accumulator chains
// in the widest vector unit this CPU has: AVX-512, else AVX2+FMA, else SSE mul+add).
double MeasureFmaPeak(ThreadPool& pool);

// Name of the vector unit MeasureFmaPeak used ("avx512", "avx2", "sse").
const char* FmaPeakIsa();

// Peak int8 multiply-add rate (u8 x s8 products summed into int32, 1e9/s) with all threads of
// `pool`: independent vpdpbusd zmm chains, the instruction the int8 GEMV kernels are built on.
// The ceiling of a GEMV whose weights are cheap to read (a working set in L2): no kernel can
// multiply faster than this. 0 without AVX512-VNNI.
double MeasureInt8DotPeak(ThreadPool& pool);

// Peak rate (1e9 weights/s, all threads of `pool`) at which 4-bit weights packed two to a byte
// can be multiplied by int8 activations: per 64 bytes, the two nibble masks and two vpdpbusd
// that every 4-bit kernel on AVX512-VNNI needs, from L1, without the per-block scaling. Half the
// int8 MAC peak at best (the masks use the same two vector ports). 0 without AVX512-VNNI.
double MeasureInt4DotPeak(ThreadPool& pool);

// Median of `reps` timings (seconds) of fn(), after one warm-up call.
template <typename Fn>
double MedianSeconds(int reps, Fn&& fn);

}  // namespace vlmd::bench

#include "machine_limits_inl.h"
