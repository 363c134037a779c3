// The bf16 row kernels of the attention's fast path (tile_bf16.h) for AVX2 + F16C: f32 / f16 ->
// bf16 rows (F32ToBF16's integer rounding, bit for bit), the tile-layout packing of K and V^T
// (TileBf16Matrix::PackRows / PackColumns, the same bytes), and the fast precision's GELU. The
// AVX-512 tables replace them (x86/bf16_rows_inl.h).

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/kernels/tile_bf16.h"
#include "engine/kernels/x86/flash_rows_avx2_inl.h"
#include "engine/kernels/x86/x86_fill.h"

namespace vlmd::engine::kernels {
namespace {

using flash::RoundToBf16x8;

// The f32 values [x, x + count), count <= 8, the other lanes zero.
inline __m256 LoadFloats(const float* x, int64_t count) {
  if (count == 8) return _mm256_loadu_ps(x);
  alignas(32) float part[8] = {};
  std::memcpy(part, x, static_cast<size_t>(count) * sizeof(float));
  return _mm256_load_ps(part);
}

// Rounds n values to bf16, 8 at a time: load(i, count) gives the f32 values [i, i + count)
// (the other lanes zero); only the n results are written.
template <typename Load>
void RoundRowToBf16(int64_t n, uint16_t* y, Load&& load) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), RoundToBf16x8(load(i, int64_t{8})));
  }
  if (i < n) {
    const __m128i b = RoundToBf16x8(load(i, n - i));
    std::memcpy(y + i, &b, static_cast<size_t>(n - i) * 2);
  }
}

void ToBf16(const float* x, uint16_t* y, int64_t n) {
  RoundRowToBf16(n, y, [x](int64_t i, int64_t count) { return LoadFloats(x + i, count); });
}

// f16 -> f32 (exact) -> bf16 with the same rounding as ToBf16.
void F16ToBf16(const uint16_t* x, uint16_t* y, int64_t n) {
  RoundRowToBf16(n, y, [x](int64_t i, int64_t count) {
    if (count == 8) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    }
    alignas(16) uint16_t tail[8] = {};
    std::memcpy(tail, x + i, static_cast<size_t>(count) * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)));
  });
}

// GELU (tanh form) for values rounded to bf16 or int8 afterwards, relative error < 1e-4: the
// AVX-512 GeluTanhFast's form (x / (1 + z) for a < 0, x z / (1 + z) otherwise, z = 2^-|a|,
// a = -2 sqrt(2/pi) (x + 0.044715 x^3) log2 e), with 1 / (1 + z) from vrcpps and one Newton
// step (vrcpps alone is 12 bits). z is 0 for |a| > 126 (x below about -10, where the true value
// is under 2^-126 |x|): the result is then -0. x = -inf gives NaN (as the AVX-512 kernel).
void GeluTanhFast(const float* x, float* y, int64_t n) {
  const __m256 k = _mm256_set1_ps(-2.0f * 0.7978845608f * 1.44269504f);  // in log2 units
  const __m256 k3 = _mm256_set1_ps(-2.0f * 0.7978845608f * 1.44269504f * 0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  auto gelu = [&](__m256 v) {
    const __m256 a = _mm256_mul_ps(v, _mm256_fmadd_ps(_mm256_mul_ps(v, v), k3, k));
    const __m256 z = flash::Exp2Avx2(_mm256_or_ps(a, sign));
    const __m256 d = _mm256_add_ps(one, z);
    __m256 r = _mm256_rcp_ps(d);
    r = _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, two));
    const __m256 negative_a = _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_blendv_ps(z, one, negative_a)), r);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gelu(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the tail through a zero-padded vector (x == y is allowed: loaded first)
    alignas(32) float part[8];
    _mm256_store_ps(part, gelu(LoadFloats(x + i, n - i)));
    std::memcpy(y + i, part, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// TileBf16Matrix::PackRows: each row of a panel (16 columns x one pair of k values, 32-bit
// words) is two gathers of the same word from the panel's source rows, 8 each.
void PackRows(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid, int64_t k,
              uint16_t* dst) {
  if (row_stride > TileBf16Matrix::kMaxGatherRowStride) {
    TileBf16Matrix::PackRows(rows, row_stride, n, k_valid, k, dst);
    return;
  }
  const int64_t panels = (n + kTileCols - 1) / kTileCols;
  // Byte offsets of 8 source rows (row_stride values of 2 bytes each).
  const __m256i offsets =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                         _mm256_set1_epi32(static_cast<int32_t>(row_stride * 2)));
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* panel = dst + p * k * kTileCols;
    const int64_t cols = std::min<int64_t>(kTileCols, n - p * kTileCols);
    const uint16_t* base = rows + p * kTileCols * row_stride;
    __m256i valid[2];  // all-ones lanes for the columns < cols, per half
    for (int h = 0; h < 2; ++h) {
      valid[h] = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(cols - 8 * h)),
                                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    for (int64_t w = 0; w < k / 2; ++w) {
      uint16_t* out = panel + w * 2 * kTileCols;
      if (2 * w + 1 < k_valid) {
        for (int h = 0; h < 2; ++h) {
          __m256i v = _mm256_setzero_si256();
          if (cols > 8 * h) {  // (a half of no column gathers nothing, nor forms its address)
            const auto* src = reinterpret_cast<const int*>(base + 8 * h * row_stride + 2 * w);
            v = _mm256_mask_i32gather_epi32(v, src, offsets, valid[h], 1);
          }
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * h), v);
        }
      } else {  // past k_valid zeros; an odd k_valid's last value with its pair partner zero
        alignas(32) uint32_t words[16] = {};
        if (2 * w < k_valid) {
          for (int64_t j = 0; j < cols; ++j) words[j] = base[j * row_stride + 2 * w];
        }
        std::memcpy(out, words, sizeof(words));
      }
    }
  }
}

// TileBf16Matrix::PackColumns: a panel row interleaves 16 values of two consecutive rows (k
// values 2w and 2w + 1 of the panel's 16 columns).
void PackColumns(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid,
                 int64_t k, uint16_t* dst) {
  const int64_t panels = (n + kTileCols - 1) / kTileCols;
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* panel = dst + p * k * kTileCols;
    const int64_t cols = std::min<int64_t>(kTileCols, n - p * kTileCols);
    const uint16_t* col = rows + p * kTileCols;
    auto load = [&](int64_t i) {
      if (i >= k_valid) return _mm256_setzero_si256();
      const uint16_t* src = col + i * row_stride;
      if (cols == kTileCols) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
      alignas(32) uint16_t part[16] = {};
      std::memcpy(part, src, static_cast<size_t>(cols) * sizeof(uint16_t));
      return _mm256_load_si256(reinterpret_cast<const __m256i*>(part));
    };
    for (int64_t i = 0; i < k; i += 2) {
      const __m256i r0 = load(i), r1 = load(i + 1);
      // Per 128-bit lane: unpacklo interleaves columns 0-3 (8-11), unpackhi 4-7 (12-15).
      const __m256i lo = _mm256_unpacklo_epi16(r0, r1), hi = _mm256_unpackhi_epi16(r0, r1);
      auto* out = reinterpret_cast<__m256i*>(panel + i * kTileCols);
      _mm256_storeu_si256(out, _mm256_permute2x128_si256(lo, hi, 0x20));      // columns 0-7
      _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(lo, hi, 0x31));  // columns 8-15
    }
  }
}

}  // namespace

void FillAvx2Bf16Rows(KernelTable* t) {
  t->to_bf16 = ToBf16;
  // The BF16 activation format of the float matmuls is the same rounding.
  t->convert_act[static_cast<int>(DType::kBF16)] = [](const float* x, void* y, int64_t k) {
    ToBf16(x, static_cast<uint16_t*>(y), k);
  };
  t->f16_to_bf16 = F16ToBf16;
  t->tile_pack_rows = PackRows;
  t->tile_pack_columns = PackColumns;
  t->gelu_tanh_fast = GeluTanhFast;
}

}  // namespace vlmd::engine::kernels
