// What the packed int8 tests share (packed_matrix_test.cpp, packed_matmul_test.cpp): seeded
// weights, their rows in a GGUF type, and a packed weight read back from the layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
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

// rows x k values of a format vlmd reads but cannot write (Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS):
// random bytes, every f16 scale then set to a finite value in +-[2^-8, 2^-4] (a random f16 may
// be inf or NaN; Q5_1's min takes either sign).
inline std::vector<uint8_t> RandomBlocks(DType type, int64_t rows, int64_t k, uint32_t seed) {
  const auto& traits = GetDTypeTraits(type);
  std::vector<size_t> scale_offsets;
  switch (type) {
    case DType::kQ5_1: scale_offsets = {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}; break;
    case DType::kIQ4_NL: scale_offsets = {offsetof(BlockIQ4_NL, d)}; break;
    case DType::kQ2_K: scale_offsets = {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}; break;
    case DType::kQ3_K: scale_offsets = {offsetof(BlockQ3_K, d)}; break;
    case DType::kIQ4_XS: scale_offsets = {offsetof(BlockIQ4_XS, d)}; break;
    default: ADD_FAILURE() << "RandomBlocks: not a read-only format"; return {};
  }
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(*RowBytes(type, k) * static_cast<size_t>(rows));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> magnitude(1.0f / 256, 1.0f / 16);
  for (size_t block = 0; block < out.size() / static_cast<size_t>(traits.block_bytes); ++block) {
    for (size_t off : scale_offsets) {
      // d and dmin of the K formats stay positive (llama.cpp writes them so); Q5_1's m is signed.
      const bool negative = type == DType::kQ5_1 && off == offsetof(BlockQ5_1, m) && (rng() & 1);
      const uint16_t h = F32ToF16(negative ? -magnitude(rng) : magnitude(rng));
      std::memcpy(out.data() + block * traits.block_bytes + off, &h, sizeof(h));
    }
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
