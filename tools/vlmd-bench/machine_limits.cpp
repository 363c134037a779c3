// Bandwidth, FMA-peak and int8-dot-peak probes. The inner loops are compiled for AVX-512 / AVX2
// with target attributes and chosen from CPUID, since the tool itself is built for the x86-64-v2
// baseline.

#include "machine_limits.h"

#include <immintrin.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/cpu_features.h"
#include "core/large_alloc.h"

namespace vlmd::bench {
namespace {

// GCC 12's avx512fintrin.h builds the _mm512_reduce_* intrinsics from a half-initialized vector,
// which -Wuninitialized reports where they are inlined: a false positive, silenced for the probes.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

// Sums the buffer with 4 independent vector accumulators (enough loads in flight to saturate
// the memory system); returns the sum so the compiler cannot drop the reads.
__attribute__((target("avx512f"))) float ReadAvx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx2"))) float ReadAvx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

float ReadSse(const float* p, size_t n) {
  __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 16 <= n; i += 16) {
    a0 = _mm_add_ps(a0, _mm_load_ps(p + i));
    a1 = _mm_add_ps(a1, _mm_load_ps(p + i + 4));
    a2 = _mm_add_ps(a2, _mm_load_ps(p + i + 8));
    a3 = _mm_add_ps(a3, _mm_load_ps(p + i + 12));
  }
  float out[4];
  _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)));
  return out[0] + out[1] + out[2] + out[3];
}

// 16 independent FMA chains of 16 floats: 2 FMA ports x ~4-cycle latency need >= 8 in flight.
__attribute__((target("avx512f"))) float FmaAvx512(int64_t iters) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(0.001f * j);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float FmaAvx2(int64_t iters) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(0.001f * j);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

float FmaSse(int64_t iters) {
  __m128 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm_set1_ps(0.001f * j);
  const __m128 m = _mm_set1_ps(0.999999f), c = _mm_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 8; ++j) acc[j] = _mm_add_ps(_mm_mul_ps(acc[j], m), c);
  }
  float out[4];
  _mm_storeu_ps(out, acc[0]);
  return out[0];
}

// 16 independent vpdpbusd chains: two instructions per cycle at a latency of ~5 cycles need at
// least 10 in flight.
__attribute__((target("avx512f,avx512vnni"))) int32_t DotInt8Avx512Vnni(int64_t iters) {
  __m512i acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_epi32(j);
  __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], u, s);
    asm volatile("" : "+v"(u), "+v"(s));  // keeps the operands opaque: no hoisting
  }
  __m512i sum = acc[0];
  for (int j = 1; j < 16; ++j) sum = _mm512_add_epi32(sum, acc[j]);
  return _mm512_reduce_add_epi32(sum);
}

// The least work any 4-bit kernel on this ISA must do: vpdpbusd multiplies whole bytes and a
// byte holds two 4-bit weights, so each 64-byte load of packed nibbles needs two masks (low
// nibbles, high nibbles in place) and two vpdpbusd, with the activations broadcast from memory.
// 8 panels x 2 chains keep 16 vpdpbusd in flight. The nibbles come from a 512-byte buffer in L1
// (the pointer is made opaque each iteration so the loads and masks cannot be hoisted); no
// per-block scaling, which a real kernel adds on top. Returns the sum of the accumulators.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int32_t DotInt4Avx512Vnni(
    const uint8_t* nibbles, const int8_t* act, int64_t iters) {
  constexpr int kPanels = 8;
  __m512i lo[kPanels], hi[kPanels];
  for (int v = 0; v < kPanels; ++v) lo[v] = hi[v] = _mm512_set1_epi32(v);
  const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+r"(nibbles), "+r"(act));
#pragma GCC unroll 8
    for (int v = 0; v < kPanels; ++v) {
      const __m512i raw = _mm512_load_si512(nibbles + v * 64);
      int32_t a_lo, a_hi;
      std::memcpy(&a_lo, act + 8 * (v % 4), 4);
      std::memcpy(&a_hi, act + 8 * (v % 4) + 4, 4);
      lo[v] = _mm512_dpbusd_epi32(lo[v], _mm512_and_si512(raw, low4), _mm512_set1_epi32(a_lo));
      hi[v] = _mm512_dpbusd_epi32(hi[v], _mm512_and_si512(raw, high4), _mm512_set1_epi32(a_hi));
    }
  }
  __m512i sum = _mm512_add_epi32(lo[0], hi[0]);
  for (int v = 1; v < kPanels; ++v) sum = _mm512_add_epi32(sum, _mm512_add_epi32(lo[v], hi[v]));
  return _mm512_reduce_add_epi32(sum);
}

#pragma GCC diagnostic pop

// The AVX2 packed kernel's int8 dot (packed_matmul_avx2.cpp): vpmaddubsw (32 byte products into
// 16 saturating pairs), vpmaddwd against ones (into 8 int32), vpaddd. 12 independent chains.
__attribute__((target("avx2"))) int32_t DotInt8Avx2(int64_t iters) {
  __m256i acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_epi32(j);
  __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-5);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j) {
      // The barrier makes every chain's operand a new value: without it the compiler computed
      // one vpmaddubsw + vpmaddwd per 12 chains and the probe timed mostly vpaddd (a peak ~3x
      // too high, sessions 14 and 15's first runs).
      asm volatile("" : "+x"(u));
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    }
    asm volatile("" : "+x"(s));
  }
  __m256i sum = acc[0];
  for (int j = 1; j < 12; ++j) sum = _mm256_add_epi32(sum, acc[j]);
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), sum);
  return out[0] + out[7];
}

// The AVX-VNNI packed kernel's int8 dot: the VEX vpdpbusd on 256 bits, 12 independent chains
// in named registers. Written as one asm block: with the intrinsic, or with an array of
// accumulators, GCC 12 copied and spilled accumulators every iteration (half the rate).
__attribute__((target("avx2,avxvnni"))) int32_t DotInt8AvxVnni(int64_t iters) {
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2),
          a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5),
          a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7), a8 = _mm256_set1_epi32(8),
          a9 = _mm256_set1_epi32(9), a10 = _mm256_set1_epi32(10), a11 = _mm256_set1_epi32(11);
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(
        "%{vex%} vpdpbusd %13, %12, %0\n\t%{vex%} vpdpbusd %13, %12, %1\n\t"
        "%{vex%} vpdpbusd %13, %12, %2\n\t%{vex%} vpdpbusd %13, %12, %3\n\t"
        "%{vex%} vpdpbusd %13, %12, %4\n\t%{vex%} vpdpbusd %13, %12, %5\n\t"
        "%{vex%} vpdpbusd %13, %12, %6\n\t%{vex%} vpdpbusd %13, %12, %7\n\t"
        "%{vex%} vpdpbusd %13, %12, %8\n\t%{vex%} vpdpbusd %13, %12, %9\n\t"
        "%{vex%} vpdpbusd %13, %12, %10\n\t%{vex%} vpdpbusd %13, %12, %11"
        : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7),
          "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11)
        : "x"(u), "x"(s));
  }
  const __m256i sum = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7))),
      _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), sum);
  return out[0] + out[7];
}

// The AVX-VNNI 4-bit kernel's least work: per 32 bytes of nibbles one mask, one shift + mask and
// two vpdpbusd into int32 (no widening). 8 accumulators; activations broadcast from L1. (Six
// vectors with the low and high nibbles in separate chains read 14% less on a Zen 5: the
// masks and shifts, not the chains' latency, bound it.)
__attribute__((target("avx2,avxvnni"))) int32_t DotInt4AvxVnni(const uint8_t* nibbles,
                                                               const int8_t* act, int64_t iters) {
  constexpr int kVecs = 8;
  __m256i acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_setzero_si256();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+r"(nibbles), "+r"(act));
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(nibbles + v * 32));
      int32_t a_lo, a_hi;
      std::memcpy(&a_lo, act + 8 * (v % 4), 4);
      std::memcpy(&a_hi, act + 8 * (v % 4) + 4, 4);
      acc[v] = _mm256_dpbusd_avx_epi32(acc[v], _mm256_and_si256(raw, low4),
                                       _mm256_set1_epi32(a_lo));
      acc[v] = _mm256_dpbusd_avx_epi32(acc[v], _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4),
                                       _mm256_set1_epi32(a_hi));
    }
  }
  __m256i sum = acc[0];
  for (int v = 1; v < kVecs; ++v) sum = _mm256_add_epi32(sum, acc[v]);
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), sum);
  return out[0] + out[7];
}

// The AVX2 4-bit kernel's least work: per 32 bytes of nibbles one mask, one shift + mask and two
// vpmaddubsw added into an int16 accumulator (widened once per 8 loads, as a 32-element block
// is). 8 accumulators; activations broadcast from L1.
__attribute__((target("avx2"))) int32_t DotInt4Avx2(const uint8_t* nibbles, const int8_t* act,
                                                    int64_t iters) {
  constexpr int kVecs = 8;
  __m256i acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = _mm256_setzero_si256();
  __m256i wide = _mm256_setzero_si256();
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+r"(nibbles), "+r"(act));
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(nibbles + v * 32));
      int32_t a_lo, a_hi;
      std::memcpy(&a_lo, act + 8 * (v % 4), 4);
      std::memcpy(&a_hi, act + 8 * (v % 4) + 4, 4);
      acc[v] = _mm256_add_epi16(
          acc[v], _mm256_maddubs_epi16(_mm256_and_si256(raw, low4), _mm256_set1_epi32(a_lo)));
      acc[v] = _mm256_add_epi16(
          acc[v], _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low4),
                                       _mm256_set1_epi32(a_hi)));
    }
    if ((i & 7) == 7) {  // one widening per 8 loads of each accumulator
      for (int v = 0; v < kVecs; ++v) {
        wide = _mm256_add_epi32(wide, _mm256_madd_epi16(acc[v], ones));
        acc[v] = _mm256_setzero_si256();
      }
    }
  }
  for (int v = 0; v < kVecs; ++v) wide = _mm256_add_epi32(wide, _mm256_madd_epi16(acc[v], ones));
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), wide);
  return out[0] + out[7];
}

bool HasAvx512() { return GetCpuFeatures().avx512f; }
bool HasAvx2() { return GetCpuFeatures().avx2 && GetCpuFeatures().fma; }

volatile float g_sink = 0.0f;  // keeps the probes' results alive

}  // namespace

ProbeUnit ProbeUnitFor(engine::kernels::Isa kernel_isa) {
  using engine::kernels::Isa;
  ProbeUnit unit = ProbeUnit::kSse;
  switch (kernel_isa) {
    case Isa::kRef: unit = ProbeUnit::kSse; break;
    case Isa::kAvx2: unit = ProbeUnit::kAvx2; break;
    case Isa::kAvxVnni: unit = ProbeUnit::kAvxVnni; break;
    case Isa::kAvx512: unit = ProbeUnit::kAvx512; break;
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Bf16:
    case Isa::kAmx: unit = ProbeUnit::kAvx512Vnni; break;
    case Isa::kNeon:
    case Isa::kNeonDot:
    case Isa::kNeonI8mm: break;  // vlmd-bench's probes are x86 only (it builds with the server)
  }
  // Capped by the CPU (a table is only selected where it runs, but stay safe).
  if (unit == ProbeUnit::kAvx512Vnni && !GetCpuFeatures().avx512vnni) unit = ProbeUnit::kAvx512;
  if (unit == ProbeUnit::kAvx512 && !HasAvx512()) unit = ProbeUnit::kAvx2;
  if (unit == ProbeUnit::kAvxVnni && !GetCpuFeatures().avxvnni) unit = ProbeUnit::kAvx2;
  if (unit == ProbeUnit::kAvx2 && !HasAvx2()) unit = ProbeUnit::kSse;
  return unit;
}

const char* ProbeUnitName(ProbeUnit unit) {
  switch (unit) {
    case ProbeUnit::kSse: return "sse";
    case ProbeUnit::kAvx2: return "avx2";
    case ProbeUnit::kAvxVnni: return "avxvnni";
    case ProbeUnit::kAvx512: return "avx512";
    case ProbeUnit::kAvx512Vnni: return "avx512vnni";
  }
  return "sse";
}

const char* Int8DotPeakInstructions(ProbeUnit unit) {
  if (unit == ProbeUnit::kAvx512Vnni) return "vpdpbusd";
  if (unit == ProbeUnit::kAvxVnni) return "vpdpbusd ymm";
  if (unit == ProbeUnit::kSse) return "none";
  return "vpmaddubsw+vpmaddwd+vpaddd";
}

const char* Int4DotPeakInstructions(ProbeUnit unit) {
  if (unit == ProbeUnit::kAvx512Vnni) return "2 masks + 2 vpdpbusd per 128 weights";
  if (unit == ProbeUnit::kAvxVnni) return "3 masks/shifts + 2 vpdpbusd ymm per 64 weights";
  if (unit == ProbeUnit::kSse) return "none";
  return "3 masks/shifts + 2 vpmaddubsw per 64 weights";
}

double MeasureReadBandwidth(ThreadPool& pool, size_t bytes) {
  const size_t n = (bytes / sizeof(float) + 63) / 64 * 64;
  // The same (huge-page-backed) memory as the packed weights, so that the bound is what the
  // machine can stream, not what 4 KiB pages allow.
  LargeArray<float> buf(static_cast<float*>(AllocateLarge(n * sizeof(float))));
  if (!buf) return 0.0;
  for (size_t i = 0; i < n; ++i) buf.get()[i] = static_cast<float>(i & 1023) * 1e-3f;
  const int threads = pool.size();
  // Enough passes that one timing covers >= ~1 GiB of reads: single passes over ~100 MB
  // varied by up to 2x on the 2-vCPU VM (and read below what a decode step then streamed).
  const int passes = static_cast<int>(std::max<size_t>(1, (size_t{1} << 30) / (n * sizeof(float))));
  auto run = [&] {
    pool.ParallelFor(threads, [&](int64_t t, int) {
      int64_t b, e;
      SplitRange(static_cast<int64_t>(n), threads, t, 64, &b, &e);
      float s = 0;
      for (int p = 0; p < passes; ++p) {
        const float* base = buf.get() + b;
        const size_t len = static_cast<size_t>(e - b);
        s += HasAvx512() ? ReadAvx512(base, len) : HasAvx2() ? ReadAvx2(base, len) : ReadSse(base, len);
      }
      g_sink = g_sink + s;
    });
  };
  const double sec = MedianSeconds(7, run);
  return static_cast<double>(n) * sizeof(float) * passes / sec / 1e9;
}

double MeasureInt8DotPeak(ThreadPool& pool, ProbeUnit unit) {
  if (unit == ProbeUnit::kSse) return 0.0;
  const bool vnni = unit == ProbeUnit::kAvx512Vnni;
  constexpr int64_t kIters = 4'000'000;
  const int threads = pool.size();
  std::atomic<int32_t> sink{0};
  auto run = [&] {
    pool.ParallelFor(threads, [&](int64_t, int) {
      sink.fetch_add(vnni                            ? DotInt8Avx512Vnni(kIters)
                     : unit == ProbeUnit::kAvxVnni ? DotInt8AvxVnni(kIters)
                                                   : DotInt8Avx2(kIters));
    });
  };
  const double sec = MedianSeconds(5, run);
  // VNNI: 16 instructions x 64 byte products; AVX2 and AVX-VNNI: 12 chains x 32 byte products.
  const double macs_per_iter = vnni ? 16.0 * 64 : 12.0 * 32;
  return macs_per_iter * kIters * threads / sec / 1e9;
}

double MeasureInt4DotPeak(ThreadPool& pool, ProbeUnit unit) {
  if (unit == ProbeUnit::kSse) return 0.0;
  const bool vnni = unit == ProbeUnit::kAvx512Vnni;
  constexpr int64_t kIters = 8'000'000;  // ~20 ms per timing
  const int threads = pool.size();
  std::atomic<int32_t> sink{0};
  auto run = [&] {
    pool.ParallelFor(threads, [&](int64_t, int) {
      alignas(64) uint8_t nibbles[8 * 64];
      alignas(64) int8_t act[32];
      for (int i = 0; i < 8 * 64; ++i) nibbles[i] = static_cast<uint8_t>(i * 37);
      for (int i = 0; i < 32; ++i) act[i] = static_cast<int8_t>(i * 5 - 80);
      sink.fetch_add(vnni                            ? DotInt4Avx512Vnni(nibbles, act, kIters)
                     : unit == ProbeUnit::kAvxVnni ? DotInt4AvxVnni(nibbles, act, kIters)
                                                   : DotInt4Avx2(nibbles, act, kIters));
    });
  };
  const double sec = MedianSeconds(7, run);
  // VNNI: 8 loads x 64 bytes x 2 nibbles; AVX2 and AVX-VNNI: 8 loads x 32 bytes x 2 nibbles.
  const double weights_per_iter = vnni ? 8.0 * 128 : 8.0 * 64;
  return weights_per_iter * kIters * threads / sec / 1e9;
}

double MeasureFmaPeak(ThreadPool& pool, ProbeUnit unit) {
  constexpr int64_t kIters = 4'000'000;
  const int threads = pool.size();
  const bool wide = unit == ProbeUnit::kAvx512 || unit == ProbeUnit::kAvx512Vnni;
  const bool avx2 = unit == ProbeUnit::kAvx2 || unit == ProbeUnit::kAvxVnni;
  auto run = [&] {
    pool.ParallelFor(threads, [&](int64_t, int) {
      const float s = wide ? FmaAvx512(kIters) : avx2 ? FmaAvx2(kIters) : FmaSse(kIters);
      g_sink = g_sink + s;
    });
  };
  const double sec = MedianSeconds(5, run);
  const double flops_per_iter = wide ? 16 * 16 * 2 : avx2 ? 12 * 8 * 2 : 8 * 4 * 2;
  return flops_per_iter * kIters * threads / sec / 1e9;
}

}  // namespace vlmd::bench
