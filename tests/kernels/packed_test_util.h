// What the packed int8 tests share (packed_matrix_test.cpp, packed_matmul_test.cpp): seeded
// weights, their rows in a GGUF type, and a packed weight read back from the layout.
#pragma once

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kernels/packed_int8.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"
#include "kernels/op_test_util.h"

namespace vlmd::engine::packed_test {

inline std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale = 1.0f) {
  return vlmd::testing::RandomNormal(static_cast<size_t>(n), seed, scale);
}

// rows x k values quantized row by row to `type` (the GGUF layout).
inline std::vector<uint8_t> Rows(DType type, const std::vector<float>& x, int64_t rows, int64_t k) {
  const size_t rb = *RowBytes(type, k);
  std::vector<uint8_t> out(rb * rows);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(type, x.data() + r * k, out.data() + r * rb, k).ok());
  }
  return out;
}

// Weight (col, e) as the packed layout holds it: d * (u - offset).
inline float PackedWeight(const kernels::PackedMatrix& pm, int64_t col, int64_t e) {
  const int64_t p = col / kernels::kPanelCols, b = e / 32;
  const int j = static_cast<int>(col % kernels::kPanelCols), i = static_cast<int>(e % 32);
  const uint8_t* qs = pm.qs(p, b);
  int u;
  if (kernels::HasNibbles(pm.format())) {
    const uint8_t byte = qs[(i / 8) * 64 + j * 4 + i % 4];
    u = (i % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
  } else {
    u = qs[(i / 4) * 64 + j * 4 + i % 4];
  }
  if (pm.format() == kernels::PackedFormat::kQ4K) {
    return F16ToF32(pm.scales(p, b)[j]) * static_cast<float>(u) - F16ToF32(pm.mins(p, b)[j]);
  }
  if (pm.format() == kernels::PackedFormat::kQ8Col) {
    return pm.column_scales(p)[j] * static_cast<float>(u - pm.offset());
  }
  return F16ToF32(pm.scales(p, b)[j]) * static_cast<float>(u - pm.offset());
}

}  // namespace vlmd::engine::packed_test
