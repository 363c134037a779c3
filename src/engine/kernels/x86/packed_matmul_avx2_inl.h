// The 256-bit micro-kernel of the packed int8 matmul (layout in packed_int8.h), compiled twice:
// by the AVX2 table's unit (CPUs without VNNI: Zen 2/3, Haswell to Comet Lake; the plain AVX-512
// table inherits it) and by the AVX-VNNI table's (AVX2 + VEX vpdpbusd: Alder Lake and later,
// Sierra Forest; __AVXVNNI__ is then defined).
//
// The layout is the VNNI one: a panel's 16 columns are two 256-bit vectors of 8 columns x 4
// bytes. With AVX-VNNI each 4-byte dot per column is one vpdpbusd into int32, as in the
// AVX512-VNNI kernel: the accumulator starts at -offset * sum(a) (weights stored as unsigned
// w + offset) and no sum can saturate. Without it, the dot is vpmaddubsw (u8 x s8 -> pairs
// summed into saturating int16) then vpmaddwd against ones (-> int32). Exactness then needs the
// int16 pair sums never to saturate:
//   - kQ4 / kQ4K: nibbles 0..15 times activations |a| <= 128 give pairs of at most 3840, so the
//     8 products of one 32-element block are summed in int16 (<= 30720) and widened once per
//     block; the -offset * sum(a) bias is added in int32 as in the VNNI kernel.
//   - kQ8: stored bytes u = w + 128 would give pairs up to 2 * 255 * 127 (saturates), so the
//     signed weight w = u ^ 0x80 is used with the sign moved onto the activation:
//     maddubs(|w|, sign(a, w)); |w| <= 128 and |a| <= 127 give pairs of at most 32512. This
//     needs activations in [-127, 127], which Q8_0's rule (d = amax / 127) guarantees for every
//     row the engine converts. The offset bias is then not needed. A GEMM with prepared
//     operands takes TileSplit instead (the activations split into nibbles; any bytes).
// The block's integer dot is converted to f32 and accumulated with the scale d_w * d_a by one
// FMA (kQ4K then subtracts mn * (d_a * sum(a)); kQ8Col's sums take d_a alone and are multiplied
// by the column scales after the k loop), so the result is bit for bit PackedMatmulRef's.
//
// Include only from translation units compiled with AVX2 + FMA + F16C (and -mavxvnni for the
// AVX-VNNI table); the including unit defines its Fill function with PackedMatmulDispatch.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "engine/kernels/packed_int8.h"
#include "engine/kernels/x86/keep_in_register_inl.h"
#include "engine/kernels/x86/packed_matmul_inl.h"
#include "engine/kernels/tile_table_inl.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels::packed_avx2 {
// Internal linkage: included by translation units of different ISA flags.
namespace {

#if defined(__AVXVNNI__)
inline constexpr bool kVnni = true;
#else
inline constexpr bool kVnni = false;
#endif

inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}


// Stores the 8 columns starting at `col` of one output row, only those below n.
inline void StoreColumns(float* out, int64_t col, int64_t n, __m256 v) {
  const int64_t left = n - col;
  if (left >= 8) {
    _mm256_storeu_ps(out + col, v);
  } else if (left > 0) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane);
    _mm256_maskstore_ps(out + col, mask, v);
  }
}

// kQ8Col: the sums of rows [m, m + MR) x panel p's 16 columns times the column scales.
template <int MR>
inline void ApplyColumnScales(const PackedMatmulArgs& args, int64_t p, __m256 (&f)[MR][2]) {
  const float* d = args.w->column_scales(p);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256 dw = _mm256_load_ps(d + h * 8);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) f[i][h] = _mm256_mul_ps(f[i][h], dw);
  }
}

// The results of a one-panel tile: rows [m, m + MR) x panel p's 16 columns (two vectors of 8).
template <int MR>
inline void StorePanelRows(const PackedMatmulArgs& args, int64_t m, int64_t p,
                           const __m256 (&f)[MR][2]) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    float* out = args.out + (m + i) * args.out_stride;
    StoreColumns(out, p * kPanelCols, args.w->n(), f[i][0]);
    StoreColumns(out, p * kPanelCols + 8, args.w->n(), f[i][1]);
  }
}

// Runs one-panel tiles of at most kRows rows (tiles[mr - 1]: mr rows) over rows [m0, m1) and
// panels [p0, p1), the rows of a panel one tile after the other.
template <int kRows, typename Tiles>
void ForPanelTiles(const Tiles& tiles, const PackedMatmulArgs& args, int64_t m0, int64_t m1,
                   int64_t p0, int64_t p1, const GemmPrep* prep) {
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t m = m0; m < m1; m += kRows) {
      const int mr = static_cast<int>(m1 - m < kRows ? m1 - m : kRows);
      tiles[mr - 1](args, m, p, prep);
    }
  }
}

// kFmt: the PackedFormat as an int (kQ8 0, kQ4 1, kQ4K 2, kQ8Col 3). MR activation rows x NP
// panels; each panel is two vectors of 8 columns (v = 2 * panel + half). Calls with prepared
// operands take TileSplit / TileNibbles (without VNNI) or TileVnni instead.
template <int kFmt, int MR, int NP>
void Tile(const PackedMatmulArgs& args, int64_t m, int64_t p, bool gemv) {
  constexpr bool kQ4 = FormatHasNibbles(kFmt), kMins = FormatHasMins(kFmt);
  constexpr bool kColumns = FormatHasColumnScales(kFmt);
  constexpr int NV = 2 * NP;
  constexpr auto kFormat = static_cast<PackedFormat>(kFmt);
  constexpr size_t qstep = QsBytesPerBlock(kFormat);
  constexpr size_t qstride = GroupPanels(kFormat) * qstep;
  constexpr int64_t sstride = GroupPanels(kFormat) * kPanelCols;
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const int32_t offset = w.offset();
  const int64_t ahead = kQ4 ? args.gemv_prefetch_blocks_q4 : kPrefetchBlocksQ8;
  const BlockQ8_0* a[MR];
  const int32_t* sums[MR];
  ActivationRows(args, m, nb, a, sums);
  const uint8_t* wq[NP];
  const uint16_t* ws[NP];
  const uint16_t* wm[NP];
#pragma GCC unroll 8
  for (int v = 0; v < NP; ++v) {
    wq[v] = w.qs(p + v, 0);
    ws[v] = w.scales(p + v, 0);
    wm[v] = w.mins(p + v, 0);
  }
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 f[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) f[i][v] = _mm256_setzero_ps();

  for (int64_t b = 0; b < nb; ++b) {
    if (gemv) {  // memory-bound: each panel's weights a few blocks ahead
      // With two groups per tile, near the end the first group's prefetches skip to the next
      // tile's second group (as in the AVX512-VNNI kernel: the second group's run on into the
      // next tile's first).
      const bool crossing = kQ4 && NP == 2 * kPanelGroup && b + ahead >= nb;
      const size_t skip_q = crossing ? 2 * static_cast<size_t>(nb) * qstride : 0;
      const size_t skip_s =
          crossing ? 2 * static_cast<size_t>(nb) * sstride * sizeof(uint16_t) : 0;
      const size_t scale_ahead = ahead * sstride * sizeof(uint16_t);
#pragma GCC unroll 8
      for (int v = 0; v < NP; ++v) {
        const size_t sq = v < NP / 2 ? skip_q : 0, ss = v < NP / 2 ? skip_s : 0;
        for (size_t c = 0; c < qstep; c += 64) PrefetchAhead(wq[v], ahead * qstride + c + sq);
        if constexpr (!kColumns) PrefetchAhead(ws[v], scale_ahead + ss);
        if constexpr (kMins) PrefetchAhead(wm[v], scale_ahead + ss);
      }
    }
    // One vector of 8 columns at a time, scaled into its f32 sums as soon as its integer dot is
    // done: only that vector's MR integer sums are live (with every vector's sums live until
    // the block's end, a 4-panel GEMV or a 2 x 2-panel GEMM tile did not fit 16 registers).
    __m256 da[MR], da_sum[MR];  // da_sum: the min term's activation factor d_a * sum(a)
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const float da_i = _cvtsh_ss(a[i][b].d);
      da[i] = _mm256_set1_ps(da_i);
      if constexpr (kMins) da_sum[i] = _mm256_set1_ps(da_i * static_cast<float>(sums[i][b]));
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const uint8_t* q = wq[v / 2] + (v % 2) * 32;
      __m256i acc[MR];
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {  // with VNNI the sums start at the offset's bias
        acc[i] = kVnni ? _mm256_set1_epi32(-offset * sums[i][b]) : _mm256_setzero_si256();
      }
      if constexpr (kVnni && !kQ4) {  // kQ8: the stored unsigned bytes, the offset as the bias
#pragma GCC unroll 8
        for (int k4 = 0; k4 < 8; ++k4) {
          const __m256i wu = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k4 * 64));
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) {
            acc[i] = _mm256_dpbusd_avx_epi32(acc[i], wu, Broadcast4(a[i][b].qs + 4 * k4));
          }
        }
      } else if constexpr (kQ4) {  // int16 sums (see the file comment) unless VNNI's int32
        const __m256i low4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 8
        for (int c = 0; c < 4; ++c) {
          __m256i lo, hi;
          const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + c * 64));
          lo = _mm256_and_si256(raw, low4);
          hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) {
            const int8_t* qa = a[i][b].qs + 8 * c;
            if constexpr (kVnni) {
              acc[i] = _mm256_dpbusd_avx_epi32(acc[i], lo, Broadcast4(qa));
              acc[i] = _mm256_dpbusd_avx_epi32(acc[i], hi, Broadcast4(qa + 4));
            } else {
              acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(lo, Broadcast4(qa)));
              acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(hi, Broadcast4(qa + 4)));
              KeepInRegister(acc[i]);
            }
          }
        }
        if constexpr (!kVnni) {
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) {
            acc[i] = _mm256_add_epi32(_mm256_madd_epi16(acc[i], ones16),
                                      _mm256_set1_epi32(-offset * sums[i][b]));
          }
        }
      } else {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
        for (int k4 = 0; k4 < 8; ++k4) {
          const __m256i ws8 = _mm256_xor_si256(
              _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k4 * 64)), flip);
          const __m256i wabs = _mm256_abs_epi8(ws8);
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) {
            const __m256i pairs =
                _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(Broadcast4(a[i][b].qs + 4 * k4), ws8));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(pairs, ones16));
          }
        }
      }
      if constexpr (kColumns) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          f[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), da[i], f[i][v]);
        }
      } else {
        const __m256 dw = _mm256_cvtph_ps(
            _mm_load_si128(reinterpret_cast<const __m128i*>(ws[v / 2] + (v % 2) * 8)));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          f[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), _mm256_mul_ps(dw, da[i]), f[i][v]);
        }
      }
      if constexpr (kMins) {
        const __m256 mw = _mm256_cvtph_ps(
            _mm_load_si128(reinterpret_cast<const __m128i*>(wm[v / 2] + (v % 2) * 8)));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) f[i][v] = _mm256_fnmadd_ps(mw, da_sum[i], f[i][v]);
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) {
      wq[v] += qstride;
      if constexpr (!kColumns) ws[v] += sstride;
      if constexpr (kMins) wm[v] += sstride;
    }
  }

  if constexpr (kColumns) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __m256 dw = _mm256_load_ps(w.column_scales(p + v / 2) + (v % 2) * 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) f[i][v] = _mm256_mul_ps(f[i][v], dw);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* out = args.out + (m + i) * args.out_stride;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      StoreColumns(out, (p + v / 2) * kPanelCols + (v % 2) * 8, w.n(), f[i][v]);
    }
  }
}

// The GEMM tile of the AVX-VNNI table: MR rows x one panel, both of the panel's vectors at once.
// vpdpbusd needs no temporaries, so the int32 and f32 sums of both vectors stay in registers
// beside the weights and one broadcast: kQ8 takes 3 rows (6 + 6 sums, 2 weight vectors),
// 4-bit formats 2 (4 + 4 sums, both vectors' low and high nibbles). Per k-quad a kQ8 tile loads
// 2 weight vectors and 3 broadcasts for 6 products, where Tile's vector-at-a-time order loads
// 1.5 per product; per 8 weight bytes a 4-bit tile loads 2 vectors and 4 broadcasts for 8
// products (Tile: 1.25 per product).
// f16->i8 GEMM 512 x 2048 x 2048 on one Zen 5 thread: 293 GF/s with Tile, 324-348 with these.
// kGemm: operands from `prep` and the args' a_scales / a_offsets; the 4-bit formats' unpacked
// bytes then take kQ8's loop (and kQ4 its 3 rows).
template <int kFmt, int MR, bool kGemm = false>
void TileVnni(const PackedMatmulArgs& args, int64_t m, int64_t p, const GemmPrep* prep) {
  constexpr bool kMins = FormatHasMins(kFmt);
  constexpr bool kColumns = FormatHasColumnScales(kFmt);
  constexpr bool kUnpacked = kGemm && FormatHasNibbles(kFmt);
  constexpr bool kQ4 = FormatHasNibbles(kFmt) && !kUnpacked;  // the loop splits nibbles
  constexpr auto kFormat = static_cast<PackedFormat>(kFmt);
  constexpr size_t qstride =
      kUnpacked ? kUnpackedBlockBytes : GroupPanels(kFormat) * QsBytesPerBlock(kFormat);
  constexpr int64_t sstride = GroupPanels(kFormat) * kPanelCols;
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const int32_t offset = w.offset();
  const BlockQ8_0* a[MR];
  const int32_t* sums[MR];
  ActivationRows(args, m, nb, a, sums);
  const uint8_t* wq =
      kUnpacked ? prep->unpacked + prep->UnpackedOffset(p, nb) : w.qs(p, 0);
  const uint16_t* ws = w.scales(p, 0);
  const uint16_t* wm = w.mins(p, 0);
  // kGemm: the prepared f32 scales and mins.
  const size_t first = kGemm ? prep->ColumnOffset(p, nb) : 0;
  const float* ws32 = kGemm && !kColumns ? prep->scales + first : nullptr;
  const float* wm32 = kGemm && kMins ? prep->mins + first : nullptr;
  __m256 f[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) f[i][0] = f[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i acc[MR][2];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = acc[i][1] =
          _mm256_set1_epi32(kGemm ? args.a_offsets[(m + i) * nb + b] : -offset * sums[i][b]);
    }
    if constexpr (kQ4) {
      const __m256i low4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i raw0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + c * 64));
        const __m256i raw1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + c * 64 + 32));
        const __m256i lo0 = _mm256_and_si256(raw0, low4), lo1 = _mm256_and_si256(raw1, low4);
        const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(raw0, 4), low4);
        const __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(raw1, 4), low4);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          const __m256i al = Broadcast4(a[i][b].qs + 8 * c);
          acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], lo0, al);
          acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], lo1, al);
          const __m256i ah = Broadcast4(a[i][b].qs + 8 * c + 4);
          acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], hi0, ah);
          acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], hi1, ah);
        }
      }
    } else {
#pragma GCC unroll 8
      for (int k4 = 0; k4 < 8; ++k4) {
        const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + k4 * 64));
        const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + k4 * 64 + 32));
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          const __m256i av = Broadcast4(a[i][b].qs + 4 * k4);
          acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], w0, av);
          acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], w1, av);
        }
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      if constexpr (kColumns) {
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          const float da_i = kGemm ? args.a_scales[(m + i) * nb + b] : _cvtsh_ss(a[i][b].d);
          f[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][h]), _mm256_set1_ps(da_i), f[i][h]);
        }
        continue;
      }
      const __m256 dw =
          kGemm ? _mm256_load_ps(ws32 + h * 8)
                : _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(ws + h * 8)));
      __m256 mw;
      if constexpr (kMins) {
        mw = kGemm ? _mm256_load_ps(wm32 + h * 8)
                   : _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(wm + h * 8)));
      }
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const float da_i = kGemm ? args.a_scales[(m + i) * nb + b] : _cvtsh_ss(a[i][b].d);
        f[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][h]),
                                  _mm256_mul_ps(dw, _mm256_set1_ps(da_i)), f[i][h]);
        if constexpr (kMins) {
          f[i][h] = _mm256_fnmadd_ps(
              mw, _mm256_set1_ps(da_i * static_cast<float>(sums[i][b])), f[i][h]);
        }
      }
    }
    wq += qstride;
    if constexpr (kColumns) continue;
    ws += sstride;
    if constexpr (kMins) wm += sstride;
    if constexpr (kGemm) {
      ws32 += kPanelCols;
      if constexpr (kMins) wm32 += kPanelCols;
    }
  }
  if constexpr (kColumns) ApplyColumnScales(args, p, f);
  StorePanelRows(args, m, p, f);
}

// The kQ8 GEMM tile without VNNI: MR rows x one panel (both vectors), from a GemmPrep with the
// weight biases and the split activations. The sign trick of Tile costs a vpsignb, a vpmaddwd
// and a vpaddd per row and k-quad beside the vpmaddubsw (4 operations per 32 products, 3 of
// them on the two ports that multiply). Here the activations + 128 (bytes 0..255) are split
// into nibbles h, l (once per call, GemmPrep::a_split) and multiplied by the signed weights
// w = u - 128 (prepared too, GemmPrep::unpacked):
//   sum w a = 16 sum w h + sum w l - 128 sum w,
// the last term the prepared weight bias. A nibble times |w| <= 128 gives pairs of at most
// 3840, so each int16 lane sums a block's 8 k-quads without saturating and is widened once per
// block: 2 vpmaddubsw + 2 vpaddw per row and k-quad, the adds on any vector port. The same
// integer as PackedMatmulRef's sum (u - 128) a, so the same results. 2 rows: 8 int16 sums, 4 f32
// sums, 2 weight vectors and a broadcast fill the 16 registers. kColumns: a kQ8Col matrix.
template <int MR, bool kColumns>
void TileSplit(const PackedMatmulArgs& args, int64_t m, int64_t p, const GemmPrep* prep) {
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const uint8_t* wq = prep->unpacked + prep->UnpackedOffset(p, nb);
  const size_t first = prep->ColumnOffset(p, nb);
  const float* ws32 = kColumns ? nullptr : prep->scales + first;
  const int32_t* wb = prep->weight_biases + first;
  const int8_t* split[MR];
  const float* da[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    split[i] = prep->a_split + (m + i - prep->m0) * nb * 64;
    da[i] = args.a_scales + (m + i) * nb;
  }
  __m256 f[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) f[i][0] = f[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i lo[MR][2], hi[MR][2];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      lo[i][0] = lo[i][1] = hi[i][0] = hi[i][1] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + k4 * 64));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wq + k4 * 64 + 32));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const int8_t* x = split[i] + b * 64 + 4 * k4;
        const __m256i xl = Broadcast4(x);
        lo[i][0] = _mm256_add_epi16(lo[i][0], _mm256_maddubs_epi16(xl, w0));
        lo[i][1] = _mm256_add_epi16(lo[i][1], _mm256_maddubs_epi16(xl, w1));
        const __m256i xh = Broadcast4(x + 32);
        hi[i][0] = _mm256_add_epi16(hi[i][0], _mm256_maddubs_epi16(xh, w0));
        hi[i][1] = _mm256_add_epi16(hi[i][1], _mm256_maddubs_epi16(xh, w1));
        KeepInRegister(lo[i][0]);
        KeepInRegister(lo[i][1]);
        KeepInRegister(hi[i][0]);
        KeepInRegister(hi[i][1]);
      }
    }
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i sixteens16 = _mm256_set1_epi16(16);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i bias = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + h * 8));
      __m256 dw;
      if constexpr (!kColumns) dw = _mm256_load_ps(ws32 + h * 8);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256i dot = _mm256_add_epi32(
            _mm256_add_epi32(_mm256_madd_epi16(hi[i][h], sixteens16),
                             _mm256_madd_epi16(lo[i][h], ones16)),
            bias);
        const __m256 da_i = _mm256_set1_ps(da[i][b]);
        f[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                  kColumns ? da_i : _mm256_mul_ps(dw, da_i), f[i][h]);
      }
    }
    wq += kUnpackedBlockBytes;
    if constexpr (!kColumns) ws32 += kPanelCols;
    wb += kPanelCols;
  }
  if constexpr (kColumns) ApplyColumnScales(args, p, f);
  StorePanelRows(args, m, p, f);
}

// The 4-bit GEMM tile without VNNI from a GemmPrep (quants unpacked to bytes): MR rows x one
// panel, both vectors at once, so that each activation broadcast serves both and only 2 x MR
// f32 sums are live (Tile's 2 rows x 2 panels keep 8 and spill).
template <int kFmt, int MR>
void TileNibbles(const PackedMatmulArgs& args, int64_t m, int64_t p, const GemmPrep* prep) {
  constexpr bool kMins = kFmt == 2;
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const uint8_t* wq = prep->unpacked + prep->UnpackedOffset(p, nb);
  const size_t first = prep->ColumnOffset(p, nb);
  const float* ws32 = prep->scales + first;
  const float* wm32 = kMins ? prep->mins + first : nullptr;
  const BlockQ8_0* a[MR];
  const int32_t* sums[MR];
  ActivationRows(args, m, nb, a, sums);
  const float* da[MR];
  const int32_t* offsets[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    da[i] = args.a_scales + (m + i) * nb;
    offsets[i] = args.a_offsets + (m + i) * nb;
  }
  __m256 f[MR][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) f[i][0] = f[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i acc[MR][2];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {  // k-quads 2c (low quants) and 2c + 1 (high)
      const uint8_t* q = wq + c * 128;
      const __m256i lo0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i lo1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32));
      const __m256i hi0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64));
      const __m256i hi1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 96));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256i al = Broadcast4(a[i][b].qs + 8 * c);
        const __m256i ah = Broadcast4(a[i][b].qs + 8 * c + 4);
        acc[i][0] = _mm256_add_epi16(acc[i][0], _mm256_maddubs_epi16(lo0, al));
        acc[i][1] = _mm256_add_epi16(acc[i][1], _mm256_maddubs_epi16(lo1, al));
        acc[i][0] = _mm256_add_epi16(acc[i][0], _mm256_maddubs_epi16(hi0, ah));
        acc[i][1] = _mm256_add_epi16(acc[i][1], _mm256_maddubs_epi16(hi1, ah));
        KeepInRegister(acc[i][0]);
        KeepInRegister(acc[i][1]);
      }
    }
    const __m256i ones16 = _mm256_set1_epi16(1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_load_ps(ws32 + h * 8);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(acc[i][h], ones16),
                                             _mm256_set1_epi32(offsets[i][b]));
        f[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                  _mm256_mul_ps(dw, _mm256_set1_ps(da[i][b])), f[i][h]);
        if constexpr (kMins) {
          f[i][h] = _mm256_fnmadd_ps(_mm256_load_ps(wm32 + h * 8),
                                     _mm256_set1_ps(da[i][b] * static_cast<float>(sums[i][b])),
                                     f[i][h]);
        }
      }
    }
    wq += kUnpackedBlockBytes;
    ws32 += kPanelCols;
    if constexpr (kMins) wm32 += kPanelCols;
  }
  StorePanelRows(args, m, p, f);
}

// The prepared GEMM without VNNI over rows [m0, m1) and panels [p0, p1): kQ8 and kQ8Col on
// TileSplit, the 4-bit formats on TileNibbles; 2-row tiles, one panel each.
template <int kFmt>
void PackedGemmSplit(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                     int64_t p1, const GemmPrep* prep) {
  constexpr int kRows = 2;
  static constexpr auto kSplitTiles = TileTable<kRows, 1>([]<int MR, int>() {
    if constexpr (!FormatHasNibbles(kFmt)) return &TileSplit<MR, FormatHasColumnScales(kFmt)>;
    else return &TileNibbles<kFmt, MR>;
  });
  ForPanelTiles<kRows>(kSplitTiles, args, m0, m1, p0, p1, prep);
}

// The VNNI GEMM over rows [m0, m1) and panels [p0, p1): 3-row tiles for kQ8, 2-row for the
// 4-bit formats read as nibbles (what fits the registers, see TileVnni), one panel each; with a
// GemmPrep the 4-bit formats take kQ8's 3 rows (kQ4K's min term needs no per-column temporaries:
// q4_K GEMM +11% over 2 rows).
template <int kFmt, bool kGemm>
void PackedGemmVnni(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                    int64_t p1, const GemmPrep* prep) {
  constexpr int kRows = !FormatHasNibbles(kFmt) || kGemm ? 3 : 2;
  static constexpr auto kVnniTiles =
      TileTable<kRows, 1>([]<int MR, int>() { return &TileVnni<kFmt, MR, kGemm>; });
  ForPanelTiles<kRows>(kVnniTiles, args, m0, m1, p0, p1, prep);
}

constexpr int kMaxMR = 2, kMaxNP = 4;
template <int kFmt>
constexpr auto kTiles =
    TileTable<kMaxMR, kMaxNP>([]<int MR, int NP>() { return &Tile<kFmt, MR, NP>; });

// Tile shape for a call's row count. One row (decode) takes 4 panels: a 4-bit panel group is
// then read as one contiguous stream (2-panel tiles read it in two strided passes: q4_0 decode
// 114 -> 166-198 tok/s when changed, SmolLM2-135M shape, 2 threads on a Zen 4); 4-bit matrices
// take two groups per tile first (PackedMatmulTiles: two streams side by side, decode +11-30%
// forced to `avx2` on an Intel Xeon, bench/RESULTS.md session 35). Two rows and
// more take 2 rows x 2 panels: 8 f32 sums, the most that fits the 16 registers beside the
// weights and broadcasts (4 panels for two rows would spill its 16 sums every block).
constexpr int kGemmRows = kMaxMR;
constexpr int PanelsPerTile(int64_t rows) { return rows == 1 ? kMaxNP : 2; }

// A call without prepared operands.
template <int kFmt>
void PackedMatmulTiles(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                       int64_t p1) {
  const int64_t rows = m1 - m0;
  if constexpr (kVnni) {
    // One or two rows (decode steps, two sequences batched) stay on Tile, which prefetches.
    if (rows > 2) return PackedGemmVnni<kFmt, false>(args, m0, m1, p0, p1, nullptr);
  }
  if constexpr (FormatHasNibbles(kFmt)) {
    // Two panel groups per one-row tile: their two weight streams, read side by side, keep more
    // DRAM reads in flight than one group's (p0 is a multiple of the group: ForRanges'
    // alignment in ops::MatMul; the 16 f32 sums do not fit the registers, and cost less than
    // the reads they overlap).
    if (rows == 1) {
      for (; p0 + 2 * kPanelGroup <= p1; p0 += 2 * kPanelGroup) {
        Tile<kFmt, 1, 2 * kPanelGroup>(args, m0, p0, true);
      }
    }
  }
  const int mr_max = rows < kGemmRows ? static_cast<int>(rows) : kGemmRows;
  const int np_max = PanelsPerTile(rows);
  const bool gemv = rows <= 2;  // decode steps: weights streamed from memory, prefetched
  for (int64_t p = p0; p < p1; p += np_max) {
    const int np = static_cast<int>(p1 - p < np_max ? p1 - p : np_max);
    for (int64_t m = m0; m < m1; m += mr_max) {
      const int mr = static_cast<int>(m1 - m < mr_max ? m1 - m : mr_max);
      kTiles<kFmt>[(mr - 1) * kMaxNP + (np - 1)](args, m, p, gemv);
    }
  }
}

template <int kFmt>
void PackedMatmulAvx2(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                      int64_t p1) {
  // Prepared operands: TileVnni with VNNI; without it TileSplit for kQ8 (which needs the weight
  // biases) and TileNibbles for the 4-bit formats.
  if (GemmPrep prep;
      PrepareGemm(args, m0, m1, p0, p1, &prep, !kVnni && !FormatHasNibbles(kFmt))) {
    if constexpr (kVnni) {
      return PackedGemmVnni<kFmt, true>(args, m0, m1, p0, p1, &prep);
    } else {
      return PackedGemmSplit<kFmt>(args, m0, m1, p0, p1, &prep);
    }
  }
  PackedMatmulTiles<kFmt>(args, m0, m1, p0, p1);
}

void PackedMatmulDispatch(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                          int64_t p1) {
  ForPackedFormat(args.w->format(),
                  [&]<int kFmt>() { PackedMatmulAvx2<kFmt>(args, m0, m1, p0, p1); });
}

}  // namespace
}  // namespace vlmd::engine::kernels::packed_avx2
