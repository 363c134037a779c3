// AVX512-VNNI int8 attention scores (attention_i8.h): the query and key quantizers (equal to the
// references bit for bit) and the driver's score step (flash_attention_inl.h: kScore) on
// vpdpbusd. Tiles of 4 query rows x 4 key panels: 16 int32 accumulators starting at the keys'
// biases, per 4-byte step one load per panel and one broadcast per row; then
// s = f32(sum) * key scale * query scale.
//
// Include only from translation units compiled with AVX512-VNNI, after a Rows header
// (flash_rows_avx512_inl.h).
#pragma once

// GCC 12's avx512fintrin.h builds the unmasked conversions from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports once inlined: a known false positive of the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/kernels/attention_i8.h"
#include "engine/kernels/flash_attention_inl.h"
#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels::attention_i8 {
namespace {  // internal linkage: see flash_attention_inl.h

inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// max |x| over the row and whether a value is non-finite (x * 0 is NaN exactly for those).
struct RowStats {
  float amax;
  bool bad;
};
template <typename Load>
RowStats Stats(int64_t hd, Load load) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t d = 0; d < hd; d += 16) {
    const __m512 v = load(d, TailMask(hd - d));
    const __m512 z = _mm512_mul_ps(v, _mm512_setzero_ps());
    bad |= _mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
  }
  return {_mm512_reduce_max_ps(amax), bad != 0};
}

void QuantizeQueries(const float* q, int64_t q_stride, int64_t rows, int64_t hd, int64_t hd_pad,
                     float mul, uint8_t* dst, float* scales) {
  const __m512 vmul = _mm512_set1_ps(mul);
  const __m512i offset = _mm512_set1_epi32(128);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = q + r * q_stride;
    auto load = [&](int64_t d, __mmask16 m) {
      return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + d), vmul);
    };
    const RowStats st = Stats(hd, load);
    float inv;
    RowScaleI8(st.amax, st.bad, &scales[r], &inv);
    uint8_t* out = dst + r * hd_pad;
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t d = 0; d < hd_pad; d += 16) {
      __m512i v = offset;
      if (d < hd && !st.bad) {
        v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(load(d, TailMask(hd - d)), vinv)),
                             offset);
      }
      _mm512_mask_cvtepi32_storeu_epi8(out + d, TailMask(hd_pad - d), v);
    }
  }
}

void PackKeys(const float* k, int64_t k_stride, int64_t n, int64_t hd, int64_t hd_pad,
              int8_t* panels, float* scales, int32_t* bias, float* mean) {
  for (int64_t d = 0; d < hd_pad; d += 16) {
    __m512 sum = _mm512_setzero_ps();
    if (d < hd) {
      const __mmask16 m = TailMask(hd - d);
      for (int64_t j = 0; j < n; ++j) {
        sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(m, k + j * k_stride + d));
      }
      sum = _mm512_div_ps(sum, _mm512_set1_ps(static_cast<float>(n)));
    }
    _mm512_mask_storeu_ps(mean + d, TailMask(hd_pad - d), sum);
  }
  const int64_t keys = KeyPanelsI8Keys(n);
  std::memset(panels, 0, KeyPanelsI8Bytes(n, hd_pad));
  for (int64_t j = 0; j < keys; ++j) {
    if (j >= n) {
      scales[j] = 0.0f;
      bias[j] = 0;
      continue;
    }
    const float* x = k + j * k_stride;
    auto load = [&](int64_t d, __mmask16 m) {
      return _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + d), _mm512_maskz_loadu_ps(m, mean + d));
    };
    const RowStats st = Stats(hd, load);
    float inv;
    RowScaleI8(st.amax, st.bad, &scales[j], &inv);
    bias[j] = 0;
    if (st.bad) continue;
    const __m512 vinv = _mm512_set1_ps(inv);
    __m512i total = _mm512_setzero_si512();
    int8_t* panel = panels + (j / 16) * 16 * hd_pad + (j % 16) * 4;
    for (int64_t d = 0; d < hd; d += 16) {
      const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(load(d, TailMask(hd - d)), vinv));
      total = _mm512_add_epi32(total, v);  // (masked lanes are 0)
      alignas(16) int32_t quads[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(quads), _mm512_cvtepi32_epi8(v));
      for (int64_t w = 0; w < 4 && d + 4 * w < hd; ++w) {
        std::memcpy(panel + (d / 4 + w) * 64, &quads[w], 4);
      }
    }
    bias[j] = -128 * _mm512_reduce_add_epi32(total);
  }
}

constexpr int kRows = 4;  // query rows per register tile

// S rows [0, 4) x key panels [0, N) of the block: see the file comment.
template <int N>
void ScoreTile(const uint8_t* q, int64_t ldq, const float* q_scale, const int8_t* k,
               int64_t k_panel, const float* k_scale, const int32_t* k_bias, int64_t steps,
               float* s, int64_t lds) {
  __m512i acc[kRows][N];
  for (int j = 0; j < N; ++j) {
    const __m512i b = _mm512_loadu_si512(k_bias + j * kTileCols);
    for (int i = 0; i < kRows; ++i) acc[i][j] = b;
  }
  for (int64_t w = 0; w < steps; ++w) {
    __m512i kv[N];
    for (int j = 0; j < N; ++j) kv[j] = _mm512_loadu_si512(k + j * k_panel + w * 64);
    for (int i = 0; i < kRows; ++i) {
      int32_t quad;
      std::memcpy(&quad, q + i * ldq + 4 * w, 4);
      const __m512i qv = _mm512_set1_epi32(quad);
      for (int j = 0; j < N; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], qv, kv[j]);
    }
  }
  for (int j = 0; j < N; ++j) {
    const __m512 ks = _mm512_loadu_ps(k_scale + j * kTileCols);
    for (int i = 0; i < kRows; ++i) {
      const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][j]), ks);
      _mm512_store_ps(s + i * lds + j * kTileCols, _mm512_mul_ps(v, _mm512_set1_ps(q_scale[i])));
    }
  }
}

// The driver's kScore: S = Q K^T for the 32 query rows from q0 x key panels [first,
// first + panels).
void Score(const TileAttentionArgs& a, int64_t q0, int64_t first, int64_t panels, float* s) {
  const int64_t k_panel = a.hd_pad * kTileCols;
  for (int64_t p0 = 0; p0 < panels; p0 += 4) {
    const int64_t key = (first + p0) * kTileCols;
    for (int64_t r0 = 0; r0 < 32; r0 += kRows) {
      flash::WithPanels<4>(panels - p0, [&]<int N>() {
        ScoreTile<N>(a.q_u8 + (q0 + r0) * a.ldq, a.ldq, a.q_scale + q0 + r0,
                     a.k_i8 + (first + p0) * k_panel, k_panel, a.k_scale + key, a.k_bias + key,
                     a.hd_pad / 4, s + r0 * flash::kSStride + p0 * kTileCols, flash::kSStride);
      });
    }
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels::attention_i8
