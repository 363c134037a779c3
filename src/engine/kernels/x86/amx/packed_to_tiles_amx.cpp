// Packed int8 panels to bf16 tile panels (PackedToTilesRef's contract, bit for bit) with
// AVX-512: the fast precision's GEMMs over packed weights convert a few panels per task and run
// them on the tile unit.
//
// One k-quad row of a packed block is 64 bytes: 16 columns x 4 consecutive k values (byte
// 4 j + r). Widened 16 bytes at a time (4 columns), each value becomes fma(u, d, bias) with d
// and bias of its column (bias = -offset d, or -mn for kQ4K; d is kQ8Col's column scale for every
// block), is rounded to bf16, and the quad
// splits into its two tile rows: the (r0, r1) pairs of the 16 columns and the (r2, r3) pairs,
// which are the even and the odd 32-bit lanes of the rounded values.
#include <immintrin.h>

#include "core/check.h"
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/x86/x86_fill.h"

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined here: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vlmd::engine::kernels {
namespace {

// Per-column scale and bias of one block, spread so that lane t of d4[c] / bias4[c] belongs to
// column 4 c + t / 4 (the column of lane t of the widened bytes 16 c .. 16 c + 15).
struct BlockScales {
  __m512 d4[4], bias4[4];
};

// scales: the block's f16 scales, or nullptr for kQ8Col's f32 column_scales.
inline BlockScales LoadScales(const uint16_t* scales, const float* column_scales,
                              const uint16_t* mins, int offset) {
  const __m512 d =
      scales != nullptr
          ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)))
          : _mm512_loadu_ps(column_scales);
  const __m512 bias =
      mins != nullptr
          ? _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm256_loadu_si256(
                                                   reinterpret_cast<const __m256i*>(mins))))
          : _mm512_mul_ps(d, _mm512_set1_ps(-static_cast<float>(offset)));
  BlockScales s;
  for (int c = 0; c < 4; ++c) {
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * c),
                                         _mm512_srli_epi32(
                                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15),
                                             2));
    s.d4[c] = _mm512_permutexvar_ps(idx, d);
    s.bias4[c] = _mm512_permutexvar_ps(idx, bias);
  }
  return s;
}

// The 4 x 16 values u of one k-quad (lane t of u[c]: column 4 c + t / 4, k value t % 4) to tile
// rows row0 (pairs of k values 0, 1) and row1 (2, 3).
inline void QuadToRows(const __m512i u[4], const BlockScales& s, uint16_t* row0, uint16_t* row1) {
  __m512 v[4];
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u[c]), s.d4[c], s.bias4[c]);
  }
  // Columns 0-7 and 8-15, each as 16 pairs: lane 2 j' = (r0, r1) of a column, 2 j' + 1 = (r2, r3).
  const __m512i lo = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v[1], v[0]));
  const __m512i hi = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v[3], v[2]));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  _mm512_storeu_si512(row0, _mm512_permutex2var_epi32(lo, even, hi));
  _mm512_storeu_si512(row1, _mm512_permutex2var_epi32(lo, odd, hi));
}

void PackedToTilesAvx512(const PackedMatrix& w, int64_t p0, int64_t p1, uint16_t* dst) {
  const int64_t k = w.k();
  // Panels are k * 16 values apart: a zero-padded last block would write into the next one.
  VLMD_CHECK_MSG(k % kPackBlock == 0, "PackedToTiles needs k to be a multiple of 32");
  const bool q4 = HasNibbles(w.format());
  const bool column = w.format() == PackedFormat::kQ8Col;
  const int offset = w.offset();
  constexpr int kRowElems = 2 * kPanelCols;  // bf16 values per tile row (64 bytes)
  for (int64_t p = p0; p < p1; ++p) {
    uint16_t* panel = dst + (p - p0) * k * kPanelCols;
    for (int64_t b = 0; b < w.blocks(); ++b) {
      const uint8_t* qs = w.qs(p, b);
      const BlockScales s =
          LoadScales(w.scales(p, b), column ? w.column_scales(p) : nullptr, w.mins(p, b), offset);
      uint16_t* rows = panel + b * (kPackBlock / 2) * kRowElems;  // 16 tile rows per block
      if (q4) {
        // 64 bytes per 8 k values: low nibbles are k-quad 2 c', high nibbles k-quad 2 c' + 1.
        const __m512i low4 = _mm512_set1_epi32(0x0F);
        for (int c = 0; c < 4; ++c) {
          __m512i lo[4], hi[4];
          for (int g = 0; g < 4; ++g) {
            const __m512i bytes = _mm512_cvtepu8_epi32(
                _mm_load_si128(reinterpret_cast<const __m128i*>(qs + c * 64 + g * 16)));
            lo[g] = _mm512_and_si512(bytes, low4);
            hi[g] = _mm512_srli_epi32(bytes, 4);
          }
          QuadToRows(lo, s, rows + (4 * c) * kRowElems, rows + (4 * c + 1) * kRowElems);
          QuadToRows(hi, s, rows + (4 * c + 2) * kRowElems, rows + (4 * c + 3) * kRowElems);
        }
      } else {
        for (int q = 0; q < 8; ++q) {
          __m512i u[4];
          for (int g = 0; g < 4; ++g) {
            u[g] = _mm512_cvtepu8_epi32(
                _mm_load_si128(reinterpret_cast<const __m128i*>(qs + q * 64 + g * 16)));
          }
          QuadToRows(u, s, rows + (2 * q) * kRowElems, rows + (2 * q + 1) * kRowElems);
        }
      }
    }
  }
}

}  // namespace

void FillAmxPackedToTiles(KernelTable* t) { t->packed_to_tiles = &PackedToTilesAvx512; }

}  // namespace vlmd::engine::kernels
