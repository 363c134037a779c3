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

// 12 independent vpdpbusd chains in named registers (two instructions per cycle at a latency of
// ~5 cycles need at least 10 in flight), written as one asm block as DotInt8AvxVnni is: with an
// array of 16 intrinsic accumulators GCC 12 copied every chain to another register each
// iteration, and on a Zen 5 the probe read anything from 291 to 492 G MAC/s per thread from run
// to run; this block reads 462-519 there (session 38).
__attribute__((target("avx512f,avx512vnni"))) int32_t DotInt8Avx512Vnni(int64_t iters) {
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2),
          a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5),
          a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8),
          a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(
        "vpdpbusd %13, %12, %0\n\tvpdpbusd %13, %12, %1\n\tvpdpbusd %13, %12, %2\n\t"
        "vpdpbusd %13, %12, %3\n\tvpdpbusd %13, %12, %4\n\tvpdpbusd %13, %12, %5\n\t"
        "vpdpbusd %13, %12, %6\n\tvpdpbusd %13, %12, %7\n\tvpdpbusd %13, %12, %8\n\t"
        "vpdpbusd %13, %12, %9\n\tvpdpbusd %13, %12, %10\n\tvpdpbusd %13, %12, %11"
        : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
          "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11)
        : "v"(u), "v"(s));
  }
  const __m512i sum = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
      _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
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
  // One asm block with named registers (as DotInt8Avx512Vnni, and for the same reason: with
  // arrays of intrinsic sums GCC 12 copied and spilled sums every iteration, session 38).
  __m512i l0 = _mm512_set1_epi32(0), l1 = _mm512_set1_epi32(1), l2 = _mm512_set1_epi32(2),
          l3 = _mm512_set1_epi32(3), l4 = _mm512_set1_epi32(4), l5 = _mm512_set1_epi32(5),
          l6 = _mm512_set1_epi32(6), l7 = _mm512_set1_epi32(7);
  __m512i h0 = l0, h1 = l1, h2 = l2, h3 = l3, h4 = l4, h5 = l5, h6 = l6, h7 = l7;
  const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512i raw, lo_w, hi_w, lo_a, hi_a;
  // Panel v: its 64 bytes of nibbles masked twice, against activation bytes 8 (v % 4) + 0..3
  // and + 4..7 broadcast from L1.
#define VLMD_INT4_PANEL(nib_off, act_off, lo, hi) \
  "vmovdqa64 " nib_off "(%[n]), %[raw]\n\t"       \
  "vpandd %[low4], %[raw], %[lo_w]\n\t"           \
  "vpandd %[high4], %[raw], %[hi_w]\n\t"          \
  "vpbroadcastd " act_off "(%[a]), %[lo_a]\n\t"   \
  "vpbroadcastd 4+" act_off "(%[a]), %[hi_a]\n\t" \
  "vpdpbusd %[lo_a], %[lo_w], %[" lo "]\n\t"      \
  "vpdpbusd %[hi_a], %[hi_w], %[" hi "]\n\t"
  // Two blocks of four panels: one block of eight would have 41 operands (GCC allows 30).
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(
        VLMD_INT4_PANEL("0", "0", "l0", "h0") VLMD_INT4_PANEL("64", "8", "l1", "h1")
        VLMD_INT4_PANEL("128", "16", "l2", "h2") VLMD_INT4_PANEL("192", "24", "l3", "h3")
        : [l0] "+v"(l0), [l1] "+v"(l1), [l2] "+v"(l2), [l3] "+v"(l3), [h0] "+v"(h0),
          [h1] "+v"(h1), [h2] "+v"(h2), [h3] "+v"(h3), [raw] "=&v"(raw), [lo_w] "=&v"(lo_w),
          [hi_w] "=&v"(hi_w), [lo_a] "=&v"(lo_a), [hi_a] "=&v"(hi_a)
        : [n] "r"(nibbles), [a] "r"(act), [low4] "v"(low4), [high4] "v"(high4)
        : "memory");
    asm volatile(
        VLMD_INT4_PANEL("256", "0", "l4", "h4") VLMD_INT4_PANEL("320", "8", "l5", "h5")
        VLMD_INT4_PANEL("384", "16", "l6", "h6") VLMD_INT4_PANEL("448", "24", "l7", "h7")
        : [l4] "+v"(l4), [l5] "+v"(l5), [l6] "+v"(l6), [l7] "+v"(l7), [h4] "+v"(h4),
          [h5] "+v"(h5), [h6] "+v"(h6), [h7] "+v"(h7), [raw] "=&v"(raw), [lo_w] "=&v"(lo_w),
          [hi_w] "=&v"(hi_w), [lo_a] "=&v"(lo_a), [hi_a] "=&v"(hi_a)
        : [n] "r"(nibbles), [a] "r"(act), [low4] "v"(low4), [high4] "v"(high4)
        : "memory");
  }
#undef VLMD_INT4_PANEL
  const __m512i lo = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(l0, l1), _mm512_add_epi32(l2, l3)),
      _mm512_add_epi32(_mm512_add_epi32(l4, l5), _mm512_add_epi32(l6, l7)));
  const __m512i hi = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(h0, h1), _mm512_add_epi32(h2, h3)),
      _mm512_add_epi32(_mm512_add_epi32(h4, h5), _mm512_add_epi32(h6, h7)));
  return _mm512_reduce_add_epi32(_mm512_add_epi32(lo, hi));
}


#pragma GCC diagnostic pop

// The AVX2 packed kernel's int8 dot (packed_matmul_avx2.cpp): vpmaddubsw (32 byte products into
// 16 saturating pairs), vpmaddwd against ones (into 8 int32), vpaddd. 12 independent chains in
// named registers, one asm block (the 16 registers: 12 sums, the two operands, the ones and a
// temporary): written with intrinsics, GCC 12 kept the sums in memory, a load and two stores
// per chain and iteration (on a Zen 5 that cost little: 117 -> 120 G MAC/s per thread, session
// 38). The operands are the same every time, which the block hides from the compiler (it would
// otherwise compute one product for all chains).
__attribute__((target("avx2"))) int32_t DotInt8Avx2(int64_t iters) {
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2),
          a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5),
          a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7), a8 = _mm256_set1_epi32(8),
          a9 = _mm256_set1_epi32(9), a10 = _mm256_set1_epi32(10), a11 = _mm256_set1_epi32(11);
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
  __m256i t;
#define VLMD_DOT_CHAIN(acc) \
  "vpmaddubsw %14, %13, %12\n\tvpmaddwd %15, %12, %12\n\tvpaddd %12, " acc ", " acc "\n\t"
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(VLMD_DOT_CHAIN("%0") VLMD_DOT_CHAIN("%1") VLMD_DOT_CHAIN("%2")
                     VLMD_DOT_CHAIN("%3") VLMD_DOT_CHAIN("%4") VLMD_DOT_CHAIN("%5")
                         VLMD_DOT_CHAIN("%6") VLMD_DOT_CHAIN("%7") VLMD_DOT_CHAIN("%8")
                             VLMD_DOT_CHAIN("%9") VLMD_DOT_CHAIN("%10") VLMD_DOT_CHAIN("%11")
                 : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6),
                   "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11), "=&x"(t)
                 : "x"(u), "x"(s), "x"(ones));
  }
#undef VLMD_DOT_CHAIN
  const __m256i sum = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7))),
      _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
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
  // One asm block with named registers (with an array of intrinsic sums GCC 12 spilled sums
  // every iteration, session 38): 8 sums, 5 temporaries and the mask fill 14 of the 16.
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
          c7 = c0;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i raw, lo_w, hi_w, lo_a, hi_a;
  // Vector v: its 32 bytes of nibbles, the low ones masked, the high ones shifted and masked,
  // against activation bytes 8 (v % 4) + 0..3 and + 4..7 broadcast from L1.
#define VLMD_INT4_VEC(nib_off, act_off, acc)            \
  "vmovdqa " nib_off "(%[n]), %[raw]\n\t"             \
  "vpand %[low4], %[raw], %[lo_w]\n\t"                \
  "vpsrlw $4, %[raw], %[hi_w]\n\t"                    \
  "vpand %[low4], %[hi_w], %[hi_w]\n\t"               \
  "vpbroadcastd " act_off "(%[a]), %[lo_a]\n\t"       \
  "vpbroadcastd 4+" act_off "(%[a]), %[hi_a]\n\t"     \
  "%{vex%} vpdpbusd %[lo_a], %[lo_w], %[" acc "]\n\t"   \
  "%{vex%} vpdpbusd %[hi_a], %[hi_w], %[" acc "]\n\t"
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(
        VLMD_INT4_VEC("0", "0", "c0") VLMD_INT4_VEC("32", "8", "c1")
        VLMD_INT4_VEC("64", "16", "c2") VLMD_INT4_VEC("96", "24", "c3")
        VLMD_INT4_VEC("128", "0", "c4") VLMD_INT4_VEC("160", "8", "c5")
        VLMD_INT4_VEC("192", "16", "c6") VLMD_INT4_VEC("224", "24", "c7")
        : [c0] "+x"(c0), [c1] "+x"(c1), [c2] "+x"(c2), [c3] "+x"(c3), [c4] "+x"(c4),
          [c5] "+x"(c5), [c6] "+x"(c6), [c7] "+x"(c7), [raw] "=&x"(raw), [lo_w] "=&x"(lo_w),
          [hi_w] "=&x"(hi_w), [lo_a] "=&x"(lo_a), [hi_a] "=&x"(hi_a)
        : [n] "r"(nibbles), [a] "r"(act), [low4] "x"(low4)
        : "memory");
  }
#undef VLMD_INT4_VEC
  const __m256i sum = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
      _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), sum);
  return out[0] + out[7];
}


// The AVX2 4-bit kernel's least work: per 32 bytes of nibbles one mask, one shift + mask and two
// vpmaddubsw added into an int16 accumulator (widened once per 8 loads, as a 32-element block
// is). 8 accumulators; activations broadcast from L1.
__attribute__((target("avx2"))) int32_t DotInt4Avx2(const uint8_t* nibbles, const int8_t* act,
                                                    int64_t iters) {
  // One asm block per iteration with named registers (with an array of intrinsic sums GCC 12
  // spilled sums every iteration, session 38): 8 int16 sums, 5 temporaries and the mask.
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
          c7 = c0;
  __m256i wide = _mm256_setzero_si256();
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256i raw, lo_w, hi_w, lo_a, hi_a;
#define VLMD_INT4_VEC(nib_off, act_off, acc)            \
  "vmovdqa " nib_off "(%[n]), %[raw]\n\t"             \
  "vpand %[low4], %[raw], %[lo_w]\n\t"                \
  "vpsrlw $4, %[raw], %[hi_w]\n\t"                    \
  "vpand %[low4], %[hi_w], %[hi_w]\n\t"               \
  "vpbroadcastd " act_off "(%[a]), %[lo_a]\n\t"       \
  "vpbroadcastd 4+" act_off "(%[a]), %[hi_a]\n\t"     \
  "vpmaddubsw %[lo_a], %[lo_w], %[lo_w]\n\t"          \
  "vpmaddubsw %[hi_a], %[hi_w], %[hi_w]\n\t"          \
  "vpaddw %[lo_w], %[" acc "], %[" acc "]\n\t"        \
  "vpaddw %[hi_w], %[" acc "], %[" acc "]\n\t"
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(
        VLMD_INT4_VEC("0", "0", "c0") VLMD_INT4_VEC("32", "8", "c1")
        VLMD_INT4_VEC("64", "16", "c2") VLMD_INT4_VEC("96", "24", "c3")
        VLMD_INT4_VEC("128", "0", "c4") VLMD_INT4_VEC("160", "8", "c5")
        VLMD_INT4_VEC("192", "16", "c6") VLMD_INT4_VEC("224", "24", "c7")
        : [c0] "+x"(c0), [c1] "+x"(c1), [c2] "+x"(c2), [c3] "+x"(c3), [c4] "+x"(c4),
          [c5] "+x"(c5), [c6] "+x"(c6), [c7] "+x"(c7), [raw] "=&x"(raw), [lo_w] "=&x"(lo_w),
          [hi_w] "=&x"(hi_w), [lo_a] "=&x"(lo_a), [hi_a] "=&x"(hi_a)
        : [n] "r"(nibbles), [a] "r"(act), [low4] "x"(low4)
        : "memory");
    if ((i & 7) == 7) {  // one widening per 8 loads of each sum, as per 32-element block
      for (__m256i* c : {&c0, &c1, &c2, &c3, &c4, &c5, &c6, &c7}) {
        wide = _mm256_add_epi32(wide, _mm256_madd_epi16(*c, ones));
        *c = _mm256_setzero_si256();
      }
    }
  }
#undef VLMD_INT4_VEC
  for (const __m256i c : {c0, c1, c2, c3, c4, c5, c6, c7}) {
    wide = _mm256_add_epi32(wide, _mm256_madd_epi16(c, ones));
  }
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
  // VNNI: 12 instructions x 64 byte products; AVX2 and AVX-VNNI: 12 chains x 32 byte products.
  const double macs_per_iter = vnni ? 12.0 * 64 : 12.0 * 32;
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
