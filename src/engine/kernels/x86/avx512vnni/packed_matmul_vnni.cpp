// AVX512-VNNI micro-kernel of the packed int8 matmul (layout in packed_int8.h).
//
// One tile is MR activation rows x NV panels (16 columns each). Per 32-element block: the int32
// accumulators start at -offset * sum(a) (the weights are stored as unsigned w + offset), then
// each k-quad is one vpdpbusd per (row, panel) with the row's 4 activation bytes broadcast; the
// block's integer dot is converted to f32 and accumulated with the scale d_w * d_a by one FMA
// (kQ8Col: with d_a alone, and the sums times the column scales d_w after the k loop).
// kQ4K then subtracts the block's min term mn * (d_a * sum(a)) with a second FMA. The arithmetic
// is exactly that of PackedMatmulRef (same integers, same roundings).
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/packed_int8.h"
#include "engine/kernels/x86/packed_matmul_inl.h"
#include "engine/kernels/tile_table_inl.h"
#include "engine/kernels/x86/x86_fill.h"
#include "engine/tensor/quant_blocks.h"

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined here: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace vlmd::engine::kernels {
namespace {

inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// kFmt: the PackedFormat as an int (kQ8 0, kQ4 1, kQ4K 2, kQ8Col 3). kGemm: the operands come from `prep`
// and the args' a_scales / a_offsets (GemmPrep, x86/packed_matmul_inl.h: 4-bit quants unpacked
// to the kQ8 byte order, so the inner loop is kQ8's; scales and mins as f32; the offset stays
// the format's): the same integers and f32 operations, so the same results.
template <int kFmt, int MR, int NV, bool kGemm = false>
void Tile(const PackedMatmulArgs& args, int64_t m, int64_t p, const GemmPrep* prep) {
  constexpr bool kMins = FormatHasMins(kFmt);
  constexpr bool kColumns = FormatHasColumnScales(kFmt);
  constexpr bool kUnpacked = kGemm && FormatHasNibbles(kFmt);
  constexpr bool kQ4 = FormatHasNibbles(kFmt) && !kUnpacked;  // the inner loop reads nibbles
  constexpr auto kFormat = static_cast<PackedFormat>(kFmt);
  // A panel's block and the step to its next block (see the layout in packed_int8.h).
  constexpr size_t qstep = kUnpacked ? kUnpackedBlockBytes : QsBytesPerBlock(kFormat);
  constexpr size_t qstride = kUnpacked ? qstep : GroupPanels(kFormat) * qstep;
  constexpr int64_t sstride = GroupPanels(kFormat) * kPanelCols;
  // One activation row of 4-bit weights: the low and high nibbles go to separate accumulators,
  // the high ones masked in place (16 x the nibble) and shifted back once per block. One AND per
  // nibble instead of a shift and an AND for the high one, and two dependency chains of 4
  // vpdpbusd per panel instead of one of 8. q4_0 GEMV 1024 x 2048 from L2 on one thread:
  // 55 -> 82 GB/s; SmolLM2-135M q4_0 decode on 2 threads +3.5%. With two rows the shifted high
  // nibbles serve both, and the chains are already twice as many.
  constexpr bool kSplitNibbles = kQ4 && MR == 1;
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const int32_t offset = w.offset();
  const int64_t ahead = kQ4 ? args.gemv_prefetch_blocks_q4 : kPrefetchBlocksQ8;
  const BlockQ8_0* a[MR];
  const int32_t* sums[MR];
  ActivationRows(args, m, nb, a, sums);
  const float* da_row[MR];
  const int32_t* offset_row[MR];
  if constexpr (kGemm) {
    for (int i = 0; i < MR; ++i) {
      da_row[i] = args.a_scales + (m + i) * nb;
      offset_row[i] = args.a_offsets + (m + i) * nb;
    }
  }
  const uint8_t* wq[NV];
  const uint16_t* ws[NV];
  const uint16_t* wm[NV];
  const float* ws32[NV];  // kGemm: the prepared f32 scales and mins
  const float* wm32[NV];
  for (int v = 0; v < NV; ++v) {
    wq[v] = kUnpacked ? prep->unpacked + prep->UnpackedOffset(p + v, nb)
                      : w.qs(p + v, 0);
    ws[v] = w.scales(p + v, 0);
    wm[v] = w.mins(p + v, 0);
    if constexpr (kGemm && !kColumns) {
      const size_t first = prep->ColumnOffset(p + v, nb);
      ws32[v] = prep->scales + first;
      wm32[v] = kMins ? prep->mins + first : nullptr;
    }
  }
  __m512 f[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) f[i][v] = _mm512_setzero_ps();

  for (int64_t b = 0; b < nb; ++b) {
    __m512i acc[MR][NV];
    for (int i = 0; i < MR; ++i) {
      const __m512i bias =
          _mm512_set1_epi32(kGemm ? offset_row[i][b] : -offset * sums[i][b]);
      for (int v = 0; v < NV; ++v) acc[i][v] = bias;
    }
    if constexpr (MR <= 2) {  // GEMV: memory-bound
      // A group's blocks are one contiguous stream and the groups follow each other, so near
      // the end of a tile the second group's prefetches run on into the next tile's first
      // group. The first group's would re-read the second's start: with two groups per tile
      // they skip two groups instead, to the next tile's second stream (short streams: an
      // expert's down projection has k = 768, 24 blocks).
      const bool crossing = kQ4 && NV == 2 * kPanelGroup && b + ahead >= nb;
      const size_t skip_q = crossing ? 2 * static_cast<size_t>(nb) * qstride : 0;
      const size_t skip_s = crossing ? 2 * static_cast<size_t>(nb) * sstride * sizeof(uint16_t) : 0;
      const size_t scale_ahead = ahead * sstride * sizeof(uint16_t);
      for (int v = 0; v < NV; ++v) {
        const size_t sq = v < NV / 2 ? skip_q : 0, ss = v < NV / 2 ? skip_s : 0;
        for (size_t c = 0; c < qstep; c += 64) PrefetchAhead(wq[v], ahead * qstride + c + sq);
        if constexpr (!kColumns) PrefetchAhead(ws[v], scale_ahead + ss);
        if constexpr (kMins) PrefetchAhead(wm[v], scale_ahead + ss);
      }
    }
    if constexpr (kSplitNibbles) {
      const __m512i low4 = _mm512_set1_epi8(0x0F);
      const __m512i high4 = _mm512_set1_epi8(static_cast<char>(0xF0));
      __m512i acc_hi[NV];
      for (int v = 0; v < NV; ++v) acc_hi[v] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i al = Broadcast4(a[0][b].qs + 8 * c);
        const __m512i ah = Broadcast4(a[0][b].qs + 8 * c + 4);
        for (int v = 0; v < NV; ++v) {
          const __m512i raw = _mm512_load_si512(wq[v] + c * 64);
          acc[0][v] = _mm512_dpbusd_epi32(acc[0][v], _mm512_and_si512(raw, low4), al);
          acc_hi[v] = _mm512_dpbusd_epi32(acc_hi[v], _mm512_and_si512(raw, high4), ah);
        }
      }
      // acc_hi is 16 x the high nibbles' dot: the shift is exact.
      for (int v = 0; v < NV; ++v) {
        acc[0][v] = _mm512_add_epi32(acc[0][v], _mm512_srai_epi32(acc_hi[v], 4));
      }
    } else if constexpr (kQ4) {
      const __m512i low4 = _mm512_set1_epi8(0x0F);
      for (int c = 0; c < 4; ++c) {
        __m512i al[MR], ah[MR];
        for (int i = 0; i < MR; ++i) {
          al[i] = Broadcast4(a[i][b].qs + 8 * c);
          ah[i] = Broadcast4(a[i][b].qs + 8 * c + 4);
        }
        for (int v = 0; v < NV; ++v) {
          const __m512i raw = _mm512_load_si512(wq[v] + c * 64);
          const __m512i lo = _mm512_and_si512(raw, low4);
          for (int i = 0; i < MR; ++i) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], lo, al[i]);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
          for (int i = 0; i < MR; ++i) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], hi, ah[i]);
        }
      }
    } else {
      for (int q = 0; q < 8; ++q) {
        __m512i wv[NV];
        for (int v = 0; v < NV; ++v) wv[v] = _mm512_load_si512(wq[v] + q * 64);
        for (int i = 0; i < MR; ++i) {
          const __m512i av = Broadcast4(a[i][b].qs + 4 * q);
          for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], wv[v], av);
        }
      }
    }
    __m512 dw[NV], mw[NV];
    for (int v = 0; v < NV; ++v) {
      wq[v] += qstride;
      if constexpr (kColumns) continue;
      if constexpr (kGemm) {
        dw[v] = _mm512_load_ps(ws32[v]);
        ws32[v] += kPanelCols;
        if constexpr (kMins) {
          mw[v] = _mm512_load_ps(wm32[v]);
          wm32[v] += kPanelCols;
        }
        continue;
      }
      dw[v] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(ws[v])));
      ws[v] += sstride;
      if constexpr (kMins) {
        mw[v] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wm[v])));
        wm[v] += sstride;
      }
    }
    for (int i = 0; i < MR; ++i) {
      const float da_i = kGemm ? da_row[i][b] : _cvtsh_ss(a[i][b].d);
      const __m512 da = _mm512_set1_ps(da_i);
      for (int v = 0; v < NV; ++v) {
        const __m512 scale = kColumns ? da : _mm512_mul_ps(dw[v], da);
        f[i][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][v]), scale, f[i][v]);
      }
      if constexpr (kMins) {
        const __m512 da_sum = _mm512_set1_ps(da_i * static_cast<float>(sums[i][b]));
        for (int v = 0; v < NV; ++v) f[i][v] = _mm512_fnmadd_ps(mw[v], da_sum, f[i][v]);
      }
    }
  }

  if constexpr (kColumns) {
    for (int v = 0; v < NV; ++v) {
      const __m512 dw = _mm512_load_ps(w.column_scales(p + v));
      for (int i = 0; i < MR; ++i) f[i][v] = _mm512_mul_ps(f[i][v], dw);
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* out = args.out + (m + i) * args.out_stride;
    for (int v = 0; v < NV; ++v) {
      const int64_t col = (p + v) * kPanelCols;
      const int64_t left = w.n() - col;
      if (left >= kPanelCols) {
        _mm512_storeu_ps(out + col, f[i][v]);
      } else {
        _mm512_mask_storeu_ps(out + col, static_cast<__mmask16>((1u << left) - 1), f[i][v]);
      }
    }
  }
}

constexpr int kMaxMR = 4, kMaxNV = 4;
template <int kFmt, bool kGemm = false>
constexpr auto kTiles =
    TileTable<kMaxMR, kMaxNV>([]<int MR, int NV>() { return &Tile<kFmt, MR, NV, kGemm>; });

// Panels per tile for a tile height: what fits the 32 vector registers (accumulators, f32 sums,
// weight vectors and broadcasts) without spilling. nibbles: the 4-bit formats read in place.
constexpr int PanelsPerTile(bool nibbles, int64_t rows) {
  if (rows <= 2) return 4;
  return nibbles ? 2 : 3;
}

template <int kFmt>
void PackedMatmulVnni(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                      int64_t p1) {
  // A GEMV over 4-bit weights takes two panel groups (8 panels) per tile: their two weight
  // streams, read side by side, keep more DRAM reads in flight than one group's stream does.
  // Decode on an Intel AMX machine, 2 threads, alternated runs: 0.79-0.89 -> 0.85-0.98 of the
  // bandwidth bound on five q4_0 models (bench/RESULTS.md, session 30). p0 is a multiple of the
  // group (ForRanges' alignment in ops::MatMul), and so is every tile's first panel.
  if constexpr (FormatHasNibbles(kFmt)) {
    if (m1 - m0 == 1) {
      for (; p0 + 2 * kPanelGroup <= p1; p0 += 2 * kPanelGroup) {
        Tile<kFmt, 1, 2 * kPanelGroup>(args, m0, p0, nullptr);
      }
    }
  }
  // With a GemmPrep every format runs kQ8's inner loop: 3 panels per tile (kQ4K too, since its
  // min term needs no per-column temporaries: q4_K GEMM +7% over 2 panels), else
  // PanelsPerTile's.
  GemmPrep prep;
  const bool gemm = PrepareGemm(args, m0, m1, p0, p1, &prep);
  const int nv_max = gemm ? 3
                          : PanelsPerTile(FormatHasNibbles(kFmt),
                                          m1 - m0 < kMaxMR ? m1 - m0 : kMaxMR);
  const auto& tiles = gemm ? kTiles<kFmt, true> : kTiles<kFmt, false>;
  for (int64_t p = p0; p < p1; p += nv_max) {
    const int nv = static_cast<int>(p1 - p < nv_max ? p1 - p : nv_max);
    for (int64_t m = m0; m < m1; m += kMaxMR) {
      const int mr = static_cast<int>(m1 - m < kMaxMR ? m1 - m : kMaxMR);
      tiles[(mr - 1) * kMaxNV + (nv - 1)](args, m, p, gemm ? &prep : nullptr);
    }
  }
}

void PackedMatmulDispatch(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                          int64_t p1) {
  ForPackedFormat(args.w->format(),
                  [&]<int kFmt>() { PackedMatmulVnni<kFmt>(args, m0, m1, p0, p1); });
}

}  // namespace

void FillAvx512VnniPackedMatmul(KernelTable* t) { t->packed_matmul = &PackedMatmulDispatch; }

}  // namespace vlmd::engine::kernels
