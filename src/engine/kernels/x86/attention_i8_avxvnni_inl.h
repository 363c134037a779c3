// AVX-VNNI int8 attention scores (attention_i8.h) for CPUs with AVX2 + VEX vpdpbusd but no
// AVX-512 (Alder Lake and later clients, Sierra Forest): the query and key quantizers (equal to
// the references bit for bit) and the driver's score step (flash_attention_inl.h: kScore). A key
// panel's 4-byte step is two registers (keys 0-7, 8-15); tiles of kRows query rows x one panel:
// 2 kRows int32 accumulators starting at the keys' biases, per step two loads and one broadcast
// per row; then s = f32(sum) * key scale * query scale.
//
// Include only from translation units compiled with AVX2, FMA and AVX-VNNI, after a Rows header
// (flash_rows_avx2_inl.h).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/kernels/attention_i8.h"
#include "engine/kernels/flash_attention_inl.h"
#include "engine/kernels/tile_bf16.h"

namespace vlmd::engine::kernels::attention_i8_avx2 {
namespace {  // internal linkage: see flash_attention_inl.h

// Lanes [0, left) of 8 set (AVX2 masked loads take a vector of sign bits).
inline __m256i TailMask(int64_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(left < 8 ? left : 8)), lane);
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// max |x| over the row and whether a value is non-finite (x * 0 is NaN exactly for those).
struct RowStats {
  float amax;
  bool bad;
};
template <typename Load>
RowStats Stats(int64_t hd, Load load) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  int bad = 0;
  for (int64_t d = 0; d < hd; d += 8) {
    const __m256 v = load(d, TailMask(hd - d));
    const __m256 z = _mm256_mul_ps(v, _mm256_setzero_ps());
    bad |= _mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
  }
  return {HorizontalMax(amax), bad != 0};
}

// The 8 int32 lanes of v (each in [-127, 127] + offset, fitting a byte) as 8 bytes.
inline void StoreBytes(__m256i v, uint8_t* dst, int64_t n) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(lanes[i]);
}

void QuantizeQueries(const float* q, int64_t q_stride, int64_t rows, int64_t hd, int64_t hd_pad,
                     float mul, uint8_t* dst, float* scales) {
  const __m256 vmul = _mm256_set1_ps(mul);
  const __m256i offset = _mm256_set1_epi32(128);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = q + r * q_stride;
    auto load = [&](int64_t d, __m256i m) {
      return _mm256_mul_ps(_mm256_maskload_ps(x + d, m), vmul);
    };
    const RowStats st = Stats(hd, load);
    float inv;
    RowScaleI8(st.amax, st.bad, &scales[r], &inv);
    uint8_t* out = dst + r * hd_pad;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int64_t d = 0; d < hd_pad; d += 8) {
      __m256i v = offset;
      if (d < hd && !st.bad) {
        v = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(load(d, TailMask(hd - d)), vinv)),
                             offset);
      }
      StoreBytes(v, out + d, hd_pad - d < 8 ? hd_pad - d : 8);
    }
  }
}

void PackKeys(const float* k, int64_t k_stride, int64_t n, int64_t hd, int64_t hd_pad,
              int8_t* panels, float* scales, int32_t* bias, float* mean) {
  for (int64_t d = 0; d < hd_pad; d += 8) {
    __m256 sum = _mm256_setzero_ps();
    if (d < hd) {
      const __m256i m = TailMask(hd - d);
      for (int64_t j = 0; j < n; ++j) {
        sum = _mm256_add_ps(sum, _mm256_maskload_ps(k + j * k_stride + d, m));
      }
      sum = _mm256_div_ps(sum, _mm256_set1_ps(static_cast<float>(n)));
    }
    _mm256_maskstore_ps(mean + d, TailMask(hd_pad - d), sum);
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
    auto load = [&](int64_t d, __m256i m) {
      return _mm256_sub_ps(_mm256_maskload_ps(x + d, m), _mm256_maskload_ps(mean + d, m));
    };
    const RowStats st = Stats(hd, load);
    float inv;
    RowScaleI8(st.amax, st.bad, &scales[j], &inv);
    bias[j] = 0;
    if (st.bad) continue;
    const __m256 vinv = _mm256_set1_ps(inv);
    int32_t total = 0;
    int8_t* panel = panels + (j / 16) * 16 * hd_pad + (j % 16) * 4;
    for (int64_t d = 0; d < hd; d += 8) {
      alignas(32) int32_t v[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(v),
                         _mm256_cvtps_epi32(_mm256_mul_ps(load(d, TailMask(hd - d)), vinv)));
      for (int64_t e = 0; e < 8 && d + e < hd; ++e) {
        panel[((d + e) / 4) * 64 + (d + e) % 4] = static_cast<int8_t>(v[e]);
        total += v[e];
      }
    }
    bias[j] = -128 * total;
  }
}

constexpr int kRows = 6;  // query rows per register tile: 12 accumulators

// S rows [0, R) x one key panel (16 keys) of the block: see the file comment.
template <int R>
void ScoreTile(const uint8_t* q, int64_t ldq, const float* q_scale, const int8_t* k,
               const float* k_scale, const int32_t* k_bias, int64_t steps, float* s,
               int64_t lds) {
  __m256i acc[R][2];
  for (int h = 0; h < 2; ++h) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k_bias + 8 * h));
    for (int i = 0; i < R; ++i) acc[i][h] = b;
  }
  for (int64_t w = 0; w < steps; ++w) {
    const auto* kw = reinterpret_cast<const __m256i*>(k + w * 64);
    const __m256i k0 = _mm256_loadu_si256(kw), k1 = _mm256_loadu_si256(kw + 1);
    for (int i = 0; i < R; ++i) {
      int32_t quad;
      std::memcpy(&quad, q + i * ldq + 4 * w, 4);
      const __m256i qv = _mm256_set1_epi32(quad);
      acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], qv, k0);
      acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], qv, k1);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const __m256 ks = _mm256_loadu_ps(k_scale + 8 * h);
    for (int i = 0; i < R; ++i) {
      const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[i][h]), ks);
      _mm256_store_ps(s + i * lds + 8 * h, _mm256_mul_ps(v, _mm256_set1_ps(q_scale[i])));
    }
  }
}

// The driver's kScore: S = Q K^T for the 32 query rows from q0 x key panels [first,
// first + panels).
void Score(const TileAttentionArgs& a, int64_t q0, int64_t first, int64_t panels, float* s) {
  const int64_t k_panel = a.hd_pad * kTileCols;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t key = (first + p) * kTileCols;
    const int8_t* k = a.k_i8 + (first + p) * k_panel;
    float* sp = s + p * kTileCols;
    int64_t r0 = 0;
    for (; r0 + kRows <= 32; r0 += kRows) {
      ScoreTile<kRows>(a.q_u8 + (q0 + r0) * a.ldq, a.ldq, a.q_scale + q0 + r0, k,
                       a.k_scale + key, a.k_bias + key, a.hd_pad / 4, sp + r0 * flash::kSStride,
                       flash::kSStride);
    }
    ScoreTile<32 % kRows>(a.q_u8 + (q0 + r0) * a.ldq, a.ldq, a.q_scale + q0 + r0, k,
                          a.k_scale + key, a.k_bias + key, a.hd_pad / 4,
                          sp + r0 * flash::kSStride, flash::kSStride);
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels::attention_i8_avx2
