// Shared SIMD helpers for the per-ISA matmul kernels. Included by translation units compiled with
// different -m flags, so everything lives in the namespace named by VLMD_X86_NS (one per ISA):
// an inline function compiled for AVX-512 must never be merged with its AVX2 twin by the linker.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "engine/kernels/kernel_table.h"
#include "engine/kernels/tile_table_inl.h"

#ifndef VLMD_X86_NS
#error "define VLMD_X86_NS (the per-ISA namespace) before including simd_inl.h"
#endif

namespace vlmd::engine::kernels::VLMD_X86_NS {

inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

inline uint16_t LoadU16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t LoadU32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float HSum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// acc + sum over each group of 4 adjacent bytes of u8(u) * s8(s), as int32 lanes.
// Without VNNI this is maddubs + madd: maddubs saturates its int16 pair sums, so callers keep
// |u0 * s0 + u1 * s1| <= 32767 (u <= 128 with |s| <= 127, which every caller below satisfies).
inline __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles of bytes 0..15, then high nibbles. This is
// element order for Q4_0/Q4_1/Q5_0 blocks. The 64-bit variable shift moves only the upper lane.
inline __m256i ExpandNibbles(const uint8_t* qs) {
  const __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i shifted = _mm256_srlv_epi64(x, _mm256_set_epi64x(4, 4, 0, 0));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, byte i = 0xFF when bit i is set.
inline __m256i BitsToBytes(uint32_t bits) {
  const __m256i v = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                         0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

template <int MR, int NR>
inline void StoreTile(const MatmulArgs& p, int64_t m, int64_t n, const __m256 (&acc)[MR][NR]) {
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) p.out[(m + i) * p.out_stride + n + j] = HSum(acc[i][j]);
  }
}

// A tile kernel computes out rows [m, m + MR) x columns [n, n + NR) over the whole k range.
using TileFn = void (*)(const MatmulArgs& p, int64_t m, int64_t n);

// Covers [m0, m1) x [n0, n1) with MR x NR tiles. Column tiles are the outer loop so that the NR
// weight rows of a tile stay in L1 while every activation row of the block streams past them.
template <class Kernel, int MR, int NR>
void RunTiles(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  // Kernel::Tile<mr, nr> for every 1 <= mr <= MR, 1 <= nr <= NR, so edges reuse the same code.
  static constexpr auto tiles =
      TileTable<MR, NR>([]<int I, int J>() -> TileFn { return &Kernel::template Tile<I, J>; });
  for (int64_t n = n0; n < n1; n += NR) {
    const int64_t nr = n1 - n < NR ? n1 - n : NR;
    for (int64_t m = m0; m < m1; m += MR) {
      const int64_t mr = m1 - m < MR ? m1 - m : MR;
      tiles[(mr - 1) * NR + (nr - 1)](p, m, n);
    }
  }
}

// The matmul entry for a weight type: a decode-shaped tile (1 activation row, several weight rows)
// when the block has few rows, else a square-ish tile that reuses each decoded weight block across
// several activation rows.
template <class Kernel, int GemvNR, int GemmMR, int GemmNR>
void MatmulEntry(const MatmulArgs& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (m1 - m0 < GemmMR) {
    RunTiles<Kernel, GemmMR, GemvNR>(p, m0, m1, n0, n1);
  } else {
    RunTiles<Kernel, GemmMR, GemmNR>(p, m0, m1, n0, n1);
  }
}

}  // namespace vlmd::engine::kernels::VLMD_X86_NS
