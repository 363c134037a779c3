// The formats vlmd reads but does not write (Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS): blocks built
// here bit by bit from chosen levels and scales, per ggml-common.h's layouts, must dequantize to
// the values those levels and scales define.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/tensor/dtype.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine {
namespace {

// Exact f16 values, so that every expected value below is one exact f32 product (or difference).
constexpr uint16_t kHalf = 0x3800;     // 0.5
constexpr uint16_t kQuarter = 0x3400;  // 0.25
constexpr uint16_t kMinusTwo = 0xC000; // -2.0

TEST(DequantizeReadOnlyTest, Q5_1) {
  BlockQ5_1 b{};
  b.d = kHalf;
  b.m = kMinusTwo;
  int level[32];
  uint32_t qh = 0;
  for (int e = 0; e < 32; ++e) level[e] = (e * 7 + 3) % 32;
  for (int j = 0; j < 16; ++j) {
    b.qs[j] = static_cast<uint8_t>((level[j] & 15) | ((level[j + 16] & 15) << 4));
    qh |= static_cast<uint32_t>(level[j] >> 4) << j;
    qh |= static_cast<uint32_t>(level[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(b.qh, &qh, 4);
  float y[32];
  ASSERT_TRUE(DequantizeRow(DType::kQ5_1, &b, y, 32).ok());
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.5f * level[e] - 2.0f) << e;
}

TEST(DequantizeReadOnlyTest, IQ4_NLMapsNibblesThroughTheNonUniformGrid) {
  BlockIQ4_NL b{};
  b.d = kQuarter;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  ASSERT_TRUE(DequantizeRow(DType::kIQ4_NL, &b, y, 32).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * kIq4NlValues[j]) << j;
    EXPECT_EQ(y[j + 16], 0.25f * kIq4NlValues[15 - j]) << j;
  }
  EXPECT_EQ(y[0], 0.25f * -127);  // the grid's ends, as ggml's kvalues_iq4nl
  EXPECT_EQ(y[15], 0.25f * 113);
}

TEST(DequantizeReadOnlyTest, Q2_K) {
  BlockQ2_K b{};
  b.d = kHalf;
  b.dmin = kQuarter;
  int scale[16], min[16], level[256];
  for (int i = 0; i < 16; ++i) {
    scale[i] = (i * 5 + 1) % 16;
    min[i] = (i * 3 + 2) % 16;
    b.scales[i] = static_cast<uint8_t>(scale[i] | (min[i] << 4));
  }
  for (int e = 0; e < 256; ++e) {
    level[e] = (e * 3 + e / 16) % 4;
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    b.qs[32 * h + l] |= static_cast<uint8_t>(level[e] << (2 * j));
  }
  float y[256];
  ASSERT_TRUE(DequantizeRow(DType::kQ2_K, &b, y, 256).ok());
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.5f * scale[e / 16] * level[e] - 0.25f * min[e / 16]) << e;
  }
}

TEST(DequantizeReadOnlyTest, Q3_K) {
  BlockQ3_K b{};
  b.d = kHalf;
  int scale[16], level[256];  // scale: the 6-bit value; level: -4..3
  for (int i = 0; i < 16; ++i) {
    scale[i] = (i * 13 + 5) % 64;
    b.scales[i % 8] |= static_cast<uint8_t>((scale[i] & 15) << (4 * (i / 8)));
    b.scales[8 + i % 4] |= static_cast<uint8_t>((scale[i] >> 4) << (2 * (i / 4)));
  }
  for (int e = 0; e < 256; ++e) {
    level[e] = (e * 5 + e / 32) % 8 - 4;
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int stored = level[e] + 4;  // bit 2 set: the level is its low 2 bits; clear: minus 4
    const int low = level[e] >= 0 ? level[e] : stored;
    b.qs[32 * h + l] |= static_cast<uint8_t>((low & 3) << (2 * j));
    if (level[e] >= 0) b.hmask[l] |= static_cast<uint8_t>(1 << (4 * h + j));
  }
  float y[256];
  ASSERT_TRUE(DequantizeRow(DType::kQ3_K, &b, y, 256).ok());
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(scale[e / 16] - 32) * static_cast<float>(level[e])) << e;
    EXPECT_EQ(quant::Q3KLevel(b, e), level[e]) << e;
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(quant::Q3KScale(b, i), scale[i] - 32) << i;
}

TEST(DequantizeReadOnlyTest, IQ4_XS) {
  BlockIQ4_XS b{};
  b.d = kQuarter;
  int scale[8], nibble[256];
  for (int i = 0; i < 8; ++i) {
    scale[i] = (i * 23 + 7) % 64;
    b.scales_l[i / 2] |= static_cast<uint8_t>((scale[i] & 15) << (4 * (i % 2)));
    b.scales_h |= static_cast<uint16_t>((scale[i] >> 4) << (2 * i));
  }
  for (int e = 0; e < 256; ++e) {
    nibble[e] = (e * 7 + e / 32) % 16;
    const int s = e / 32, j = e % 32;
    b.qs[16 * s + j % 16] |= static_cast<uint8_t>(nibble[e] << (j < 16 ? 0 : 4));
  }
  float y[256];
  ASSERT_TRUE(DequantizeRow(DType::kIQ4_XS, &b, y, 256).ok());
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(scale[e / 32] - 32) * static_cast<float>(kIq4NlValues[nibble[e]]))
        << e;
  }
}

TEST(DequantizeReadOnlyTest, TypesAreReadableButNotWritable) {
  for (DType t : {DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS}) {
    EXPECT_TRUE(GetDTypeTraits(t).compute_supported) << DTypeName(t);
    EXPECT_NE(FindDequantizeRowFn(t), nullptr) << DTypeName(t);
    EXPECT_EQ(FindQuantizeRowFn(t), nullptr) << DTypeName(t);  // vlmd-quantize cannot write them
  }
  EXPECT_EQ(ParseDType("IQ4_XS"), DType::kIQ4_XS);
  EXPECT_EQ(*RowBytes(DType::kIQ4_XS, 512), 272u);
  EXPECT_EQ(*RowBytes(DType::kQ3_K, 256), 110u);
}

}  // namespace
}  // namespace vlmd::engine
