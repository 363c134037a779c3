// Packing into the bf16 tile layout of tile_bf16.h, and the scalar reference tile matmul.
#include "engine/kernels/tile_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine::kernels {
namespace {

constexpr size_t kAlign = 64;

// Index of (column j, k index i) inside a panel of k values per column.
inline size_t PanelIndex(int64_t j, int64_t i) {
  return static_cast<size_t>((i / 2) * (2 * kTileCols) + j * 2 + (i % 2));
}

}  // namespace

Result<std::unique_ptr<TileBf16Matrix>> TileBf16Matrix::Pack(DType dtype, const void* data,
                                                             size_t row_bytes, int64_t n,
                                                             int64_t k) {
  if (!CanPack(dtype)) {
    return InvalidArgumentError("bf16 tile packing: unsupported weight type " +
                                std::string(DTypeName(dtype)));
  }
  if (n < 1 || k < 1 || data == nullptr) {
    return InvalidArgumentError("bf16 tile packing: bad shape n=" + std::to_string(n) +
                                " k=" + std::to_string(k));
  }
  const auto dense = RowBytes(dtype, k);
  if (!dense || row_bytes < static_cast<size_t>(*dense)) {
    return InvalidArgumentError("bf16 tile packing: row_bytes too small");
  }
  std::unique_ptr<TileBf16Matrix> m(new TileBf16Matrix());
  m->n_ = n;
  m->k_ = k;
  const int64_t k_padded = PaddedK(k);
  const size_t bytes =
      (PanelElements(n, k_padded) * sizeof(uint16_t) + kAlign - 1) / kAlign * kAlign;
  m->data_.reset(static_cast<uint16_t*>(AllocateLarge(bytes)));
  if (!m->data_) {
    return ResourceExhaustedError("bf16 tile packing: cannot allocate " + std::to_string(bytes) +
                                  " bytes");
  }
  std::memset(m->data_.get(), 0, bytes);
  std::vector<float> row(static_cast<size_t>(k));
  const auto* src = static_cast<const uint8_t*>(data);
  for (int64_t col = 0; col < n; ++col) {
    VLMD_RETURN_IF_ERROR(DequantizeRow(dtype, src + col * row_bytes, row.data(), k));
    uint16_t* panel =
        m->data_.get() + static_cast<size_t>(col / kTileCols) * k_padded * kTileCols;
    const int64_t j = col % kTileCols;
    for (int64_t i = 0; i < k; ++i) panel[PanelIndex(j, i)] = F32ToBF16(row[i]);
  }
  return m;
}

void TileBf16Matrix::PackRows(const uint16_t* rows, int64_t row_stride, int64_t n,
                              int64_t k_valid, int64_t k, uint16_t* dst) {
  const int64_t panels = (n + kTileCols - 1) / kTileCols;
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* panel = dst + p * k * kTileCols;
    for (int64_t j = 0; j < kTileCols; ++j) {
      const int64_t col = p * kTileCols + j;
      const uint16_t* src = rows + col * row_stride;
      const int64_t valid = col < n ? k_valid : 0;
      // A pair of bf16 values moves as one 32-bit word: (w[2r], w[2r + 1]) stays adjacent.
      for (int64_t i = 0; i < k; i += 2) {
        uint16_t* out = panel + (i / 2) * 2 * kTileCols + 2 * j;
        out[0] = i < valid ? src[i] : 0;
        out[1] = i + 1 < valid ? src[i + 1] : 0;
      }
    }
  }
}

void TileBf16Matrix::PackColumns(const uint16_t* rows, int64_t row_stride, int64_t n,
                                 int64_t k_valid, int64_t k, uint16_t* dst) {
  const int64_t panels = (n + kTileCols - 1) / kTileCols;
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* panel = dst + p * k * kTileCols;
    const int64_t width = std::min<int64_t>(kTileCols, n - p * kTileCols);
    for (int64_t i = 0; i < k; i += 2) {
      uint16_t* out = panel + (i / 2) * 2 * kTileCols;
      const uint16_t* r0 = i < k_valid ? rows + i * row_stride + p * kTileCols : nullptr;
      const uint16_t* r1 = i + 1 < k_valid ? rows + (i + 1) * row_stride + p * kTileCols : nullptr;
      for (int64_t j = 0; j < kTileCols; ++j) {
        out[2 * j] = r0 != nullptr && j < width ? r0[j] : 0;
        out[2 * j + 1] = r1 != nullptr && j < width ? r1[j] : 0;
      }
    }
  }
}

void TileBf16MatmulRef(const TileBf16Args& args, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  for (int64_t m = m0; m < m1; ++m) {
    const uint16_t* a = args.a + m * args.lda;
    for (int64_t p = p0; p < p1; ++p) {
      const uint16_t* panel = args.w + p * args.k * kTileCols;
      for (int64_t j = 0; j < kTileCols; ++j) {
        const int64_t col = p * kTileCols + j;
        if (col >= args.n) break;
        float acc = 0.0f;
        for (int64_t i = 0; i < args.k; ++i) {
          acc += BF16ToF32(a[i]) * BF16ToF32(panel[PanelIndex(j, i)]);
        }
        float v = acc * args.scale;
        if (args.bias != nullptr) v += args.bias[col];
        if (args.act != nullptr) args.act(&v, &v, 1);
        if (args.out_bf16 != nullptr) {
          F32ToBF16Row(&v, args.out_bf16 + m * args.ldo_bf16 + col, 1);
          continue;
        }
        float& o = args.out[m * args.ldo + col];
        o = args.accumulate ? o + v : v;
      }
    }
  }
}

void ToBf16Ref(const float* x, uint16_t* y, int64_t n) { F32ToBF16Row(x, y, n); }

}  // namespace vlmd::engine::kernels
