// Row quantizers: error bounds derived from each format, hand-built blocks with known values,
// degenerate inputs, activation-vs-file rounding, and the checked API's errors.
#include "engine/tensor/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/fp16.h"
#include "engine/tensor/quant_fit.h"

namespace vlmd::engine {
namespace {

constexpr double kF16HalfUlp = 1.0 / 2048;  // relative rounding error of a normal f16

// Largest |f16(v) - v| for a scale v: half an ulp, relative for normal results and 2^-25
// absolute in the f16 subnormal range (tiny blocks do get subnormal scales).
double F16Error(double v) { return std::max(std::fabs(v) * kF16HalfUlp, std::ldexp(1.0, -25)); }

std::vector<float> Gaussian(int64_t n, uint32_t seed, float sigma = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> Quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(*RowBytes(t, static_cast<int64_t>(x.size())));
  EXPECT_TRUE(QuantizeRow(t, x.data(), q.data(), static_cast<int64_t>(x.size())).ok());
  return q;
}

std::vector<float> Dequantize(DType t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  EXPECT_TRUE(DequantizeRow(t, q.data(), y.data(), n).ok());
  return y;
}

// Inputs every test runs on: smooth data, outliers, sign-restricted data and degenerate blocks.
std::vector<std::pair<std::string, std::vector<float>>> Inputs(int64_t n) {
  std::vector<std::pair<std::string, std::vector<float>>> in;
  in.emplace_back("gaussian", Gaussian(n, 1));
  in.emplace_back("gaussian_small", Gaussian(n, 2, 1e-3f));
  in.emplace_back("offset", Gaussian(n, 3, 0.2f, 1.0f));  // positive-only in practice
  std::vector<float> neg = Gaussian(n, 4);
  for (float& v : neg) v = -std::fabs(v) - 0.01f;
  in.emplace_back("negative_only", neg);
  std::vector<float> spike(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 0; i < n; i += 7) spike[i] = 0.001f * static_cast<float>(i % 5);
  spike[static_cast<size_t>(n / 3)] = 5000.0f;  // a single huge value (d stays a normal f16)
  in.emplace_back("single_huge", spike);
  in.emplace_back("zeros", std::vector<float>(static_cast<size_t>(n), 0.0f));
  return in;
}

// ---- 32-element formats: per-element bounds from the format ------------------------------

// Q8_0/Q8_1 (file): q = round(x / d32), d32 = amax/127, stored d16 = f16(d32). Rounding gives
// d32/2; the stored scale adds |q| |d16 - d32| <= 127 d32 2^-11.
TEST(QuantizeTest, Q8ErrorWithinHalfStep) {
  for (DType t : {DType::kQ8_0, DType::kQ8_1}) {
    for (const auto& [name, x] : Inputs(256)) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " " + name);
      const auto y = Dequantize(t, Quantize(t, x), 256);
      for (int b = 0; b < 8; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
        const double d = amax / 127.0;
        const double bound = (d * 0.5 + 127 * F16Error(d)) * (1 + 1e-6) + 1e-30;
        for (int j = 0; j < 32; ++j) {
          ASSERT_LE(std::fabs(double(y[32 * b + j]) - x[32 * b + j]), bound) << b << " " << j;
        }
      }
    }
  }
}

// Q4_0/Q5_0: d = max / -2^(b-1) (max = signed largest-magnitude value), levels -2^(b-1) ..
// 2^(b-1) - 1. Every value in level space lies in [-2^(b-1), 2^(b-1)]; those above the top level
// plus half a step are clipped to it (error <= |d|), all others round (error <= |d|/2).
TEST(QuantizeTest, SymmetricLegacyErrorBounds) {
  for (auto [t, half] : {std::pair{DType::kQ4_0, 8}, std::pair{DType::kQ5_0, 16}}) {
    for (const auto& [name, x] : Inputs(256)) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " " + name);
      const auto y = Dequantize(t, Quantize(t, x), 256);
      for (int b = 0; b < 8; ++b) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(x[32 * b + j]) > amax) {
            amax = std::fabs(x[32 * b + j]);
            max = x[32 * b + j];
          }
        }
        const double d = std::fabs(max) / half;
        const double slack = half * F16Error(d) * (1 + 1e-6) + 1e-30;  // stored-scale error
        for (int j = 0; j < 32; ++j) {
          const double level = max != 0 ? x[32 * b + j] / (max / -double(half)) : 0;
          const double bound = (level > half - 0.5 ? 1.0 : 0.5) * d * (1 + 1e-6) + slack;
          ASSERT_LE(std::fabs(double(y[32 * b + j]) - x[32 * b + j]), bound) << b << " " << j;
        }
      }
    }
  }
}

// Q4_1: d = (max - min)/15, m = min; error <= d/2 plus the f16 rounding of d (times 15) and m.
TEST(QuantizeTest, Q4_1ErrorWithinHalfStep) {
  for (const auto& [name, x] : Inputs(256)) {
    SCOPED_TRACE(name);
    const auto y = Dequantize(DType::kQ4_1, Quantize(DType::kQ4_1, x), 256);
    for (int b = 0; b < 8; ++b) {
      float mn = x[32 * b], mx = x[32 * b];
      for (int j = 0; j < 32; ++j) {
        mn = std::min(mn, x[32 * b + j]);
        mx = std::max(mx, x[32 * b + j]);
      }
      const double d = (double(mx) - mn) / 15;
      const double bound = (d * 0.5 + 15 * F16Error(d) + F16Error(mn)) * (1 + 1e-5) + 1e-30;
      for (int j = 0; j < 32; ++j) {
        ASSERT_LE(std::fabs(double(y[32 * b + j]) - x[32 * b + j]), bound) << b << " " << j;
      }
    }
  }
}

// ---- k-quants: nearest point of the block's own grid, and a global error bound -------------

// Reconstruction grid of element e: the values the block can represent there.
std::vector<double> GridOf(DType t, const std::vector<uint8_t>& q, int block, int e) {
  std::vector<double> grid;
  if (t == DType::kQ4_K || t == DType::kQ5_K) {
    const uint8_t* p = q.data() + block * GetDTypeTraits(t).block_bytes;
    const float d = F16ToF32(uint16_t(p[0] | p[1] << 8)), dmin = F16ToF32(uint16_t(p[2] | p[3] << 8));
    uint8_t sc, m;
    quant::UnpackScaleMinK4(e / 32, p + 4, &sc, &m);
    const int nmax = t == DType::kQ4_K ? 15 : 31;
    for (int l = 0; l <= nmax; ++l) grid.push_back(double(d) * sc * l - double(dmin) * m);
  } else if (t == DType::kQ6_K) {
    BlockQ6_K blk;
    std::memcpy(&blk, q.data() + block * sizeof(BlockQ6_K), sizeof(blk));
    const double d = double(F16ToF32(blk.d)) * blk.scales[e / 16];
    for (int l = -32; l <= 31; ++l) grid.push_back(d * l);
  } else {  // Q8_K
    BlockQ8_K blk;
    std::memcpy(&blk, q.data() + block * sizeof(BlockQ8_K), sizeof(blk));
    for (int l = -128; l <= 127; ++l) grid.push_back(double(blk.d) * l);
  }
  return grid;
}

// After choosing its scales, each k-quant requantizes every value to the nearest level of its
// sub-block's grid (Q8_K: of the block's grid). So no other grid point may be closer to x than
// the reconstruction (up to the f32 rounding of the division, a tiny fraction of a step).
// The grid choice itself is a search, bounded globally: the mean squared error must not exceed
// that of the naive min/max grid (uniform rounding error step^2/12) by more than 25%.
TEST(QuantizeTest, KQuantsPickNearestGridPointAndBeatNaiveGrid) {
  const int64_t n = 1024;
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    for (const auto& [name, x] : Inputs(n)) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " " + name);
      const auto q = Quantize(t, x);
      const auto y = Dequantize(t, q, n);
      for (int64_t e = 0; e < n; ++e) {
        ASSERT_TRUE(std::isfinite(y[e]));
        const auto grid = GridOf(t, q, static_cast<int>(e / 256), static_cast<int>(e % 256));
        const double err = std::fabs(double(y[e]) - x[e]);
        const double step = std::fabs(grid[1] - grid[0]);
        for (double g : grid) ASSERT_LE(err, std::fabs(g - x[e]) + 1e-3 * step + 1e-30) << e;
      }
      // Naive reference grid per sub-block: nmax steps over [min(x, 0), max(x)] (symmetric
      // formats: 2 * amax over 2 * half steps).
      const int sub = (t == DType::kQ4_K || t == DType::kQ5_K) ? 32 : (t == DType::kQ6_K ? 16 : 256);
      const double steps = t == DType::kQ4_K ? 15 : t == DType::kQ5_K ? 31 : t == DType::kQ6_K ? 63 : 254;
      double mse = 0, naive = 0;
      for (int64_t s = 0; s < n; s += sub) {
        double lo = 0, hi = 0, amax = 0;
        for (int j = 0; j < sub; ++j) {
          lo = std::min(lo, double(x[s + j]));
          hi = std::max(hi, double(x[s + j]));
          amax = std::max(amax, std::fabs(double(x[s + j])));
        }
        const double range = (t == DType::kQ4_K || t == DType::kQ5_K) ? hi - lo : 2 * amax;
        naive += sub * (range / steps) * (range / steps) / 12;
      }
      for (int64_t e = 0; e < n; ++e) mse += (double(y[e]) - x[e]) * (double(y[e]) - x[e]);
      EXPECT_LE(mse, 1.25 * naive + 1e-30);
    }
  }
}

TEST(QuantizeTest, Q8_KBsumsAreGroupSums) {
  const auto x = Gaussian(512, 9);
  std::vector<BlockQ8_K> q(2);
  quant::QuantizeRowQ8_K(x.data(), q.data(), 512);
  for (const auto& blk : q) {
    int amax_q = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += blk.qs[16 * g + j];
      EXPECT_EQ(blk.bsums[g], s);
    }
    for (int8_t v : blk.qs) amax_q = std::max(amax_q, std::abs(int(v)));
    EXPECT_EQ(amax_q, 127);  // the largest magnitude maps to the end of the range
  }
}

// ---- hand-built blocks: dequantization against the format definition ------------------------

TEST(DequantizeTest, HandBuiltLegacyBlocks) {
  const uint16_t half = 0x3800;  // 0.5
  {
    BlockQ4_0 b{half, {}};
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
    float y[32];
    quant::DequantizeRowQ4_0(&b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * (j - 8));
      EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8));
    }
  }
  {
    BlockQ4_1 b{half, 0xC000 /* -2 */, {}};
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
    float y[32];
    quant::DequantizeRowQ4_1(&b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * j - 2);
      EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 2);
    }
  }
  {
    BlockQ5_0 b{half, {}, {}};
    uint32_t qh = 0;
    int level[32];
    for (int j = 0; j < 32; ++j) level[j] = (j * 7) % 32;
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t((level[j] & 15) | ((level[j + 16] & 15) << 4));
    for (int j = 0; j < 32; ++j) qh |= uint32_t(level[j] >> 4) << j;
    std::memcpy(b.qh, &qh, 4);
    float y[32];
    quant::DequantizeRowQ5_0(&b, y, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (level[j] - 16)) << j;
  }
  {
    BlockQ8_0 b{0x3400 /* 0.25 */, {}};
    BlockQ8_1 c{0x3400, 0, {}};
    for (int j = 0; j < 32; ++j) b.qs[j] = c.qs[j] = int8_t(j * 8 - 128);
    float y[32], z[32];
    quant::DequantizeRowQ8_0(&b, y, 32);
    quant::DequantizeRowQ8_1(&c, z, 32);
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(y[j], 0.25f * (j * 8 - 128));
      EXPECT_EQ(z[j], y[j]);
    }
  }
}

// Packs 6-bit scale/min pairs per the Q4_K/Q5_K layout (written from the format description).
void PackK4Scales(const int sc[8], const int mn[8], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 4; ++j) {
    out[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

TEST(DequantizeTest, HandBuiltKQuantBlocks) {
  const int sc[8] = {1, 7, 20, 63, 33, 48, 5, 62};
  const int mn[8] = {0, 3, 63, 17, 40, 2, 31, 59};
  const float d = 0.5f, dmin = 0.25f;  // exact f16 values 0x3800, 0x3400
  int level[256];
  for (int e = 0; e < 256; ++e) level[e] = (e * 11 + e / 32) % 32;
  {
    BlockQ4_K b{};
    b.d = 0x3800;
    b.dmin = 0x3400;
    PackK4Scales(sc, mn, b.scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        b.qs[32 * c + l] = uint8_t((level[64 * c + l] & 15) | ((level[64 * c + 32 + l] & 15) << 4));
      }
    }
    float y[256];
    quant::DequantizeRowQ4_K(&b, y, 256);
    for (int e = 0; e < 256; ++e) {
      EXPECT_EQ(y[e], d * sc[e / 32] * (level[e] & 15) - dmin * mn[e / 32]) << e;
    }
  }
  {
    BlockQ5_K b{};
    b.d = 0x3800;
    b.dmin = 0x3400;
    PackK4Scales(sc, mn, b.scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = level[64 * c + l], hi = level[64 * c + 32 + l];
        b.qs[32 * c + l] = uint8_t((lo & 15) | ((hi & 15) << 4));
        b.qh[l] |= uint8_t(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
    float y[256];
    quant::DequantizeRowQ5_K(&b, y, 256);
    for (int e = 0; e < 256; ++e) {
      EXPECT_EQ(y[e], d * sc[e / 32] * level[e] - dmin * mn[e / 32]) << e;
    }
  }
  {
    BlockQ6_K b{};
    b.d = 0x3800;
    int q6[256];
    for (int e = 0; e < 256; ++e) q6[e] = (e * 13) % 64;
    for (int i = 0; i < 16; ++i) b.scales[i] = int8_t(i * 17 - 128);
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const int* v = q6 + 128 * h;
        b.ql[64 * h + l] = uint8_t((v[l] & 15) | ((v[l + 64] & 15) << 4));
        b.ql[64 * h + l + 32] = uint8_t((v[l + 32] & 15) | ((v[l + 96] & 15) << 4));
        b.qh[32 * h + l] = uint8_t((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                                   ((v[l + 96] >> 4) << 6));
      }
    }
    float y[256];
    quant::DequantizeRowQ6_K(&b, y, 256);
    for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], d * b.scales[e / 16] * (q6[e] - 32)) << e;
  }
  {
    BlockQ8_K b{};
    b.d = 0.125f;
    for (int e = 0; e < 256; ++e) b.qs[e] = int8_t(e - 128);
    float y[256];
    quant::DequantizeRowQ8_K(&b, y, 256);
    for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.125f * (e - 128));
  }
}

TEST(DequantizeTest, PlainFloatRows) {
  const float x[4] = {1.5f, -0.0f, 3e-5f, -65504.f};
  uint16_t h[4], b[4];
  float y[4];
  ASSERT_TRUE(QuantizeRow(DType::kF16, x, h, 4).ok());
  ASSERT_TRUE(DequantizeRow(DType::kF16, h, y, 4).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], F16ToF32(F32ToF16(x[i])));
  ASSERT_TRUE(QuantizeRow(DType::kBF16, x, b, 4).ok());
  ASSERT_TRUE(DequantizeRow(DType::kBF16, b, y, 4).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], BF16ToF32(F32ToBF16(x[i])));
  float c[4];
  ASSERT_TRUE(QuantizeRow(DType::kF32, x, c, 4).ok());
  EXPECT_EQ(std::memcmp(c, x, sizeof(x)), 0);
}

// ---- degenerate inputs ----------------------------------------------------------------------

TEST(QuantizeTest, AllZerosGiveZeroBlocks) {
  const std::vector<float> x(256, 0.0f);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ8_1,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    const auto y = Dequantize(t, Quantize(t, x), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << DTypeName(t);
  }
  std::vector<BlockQ8_K> q(1);
  quant::QuantizeRowQ8_K(x.data(), q.data(), 256);
  for (int16_t s : q[0].bsums) EXPECT_EQ(s, 0);  // defined (ggml leaves them unwritten)
}

// ---- activation flavour (ggml-cpu x86) vs file flavour ----------------------------------------

TEST(QuantizeTest, ActivationQ8RoundsHalfToEvenFileQ8AwayFromZero) {
  // amax = 127 makes the scale 1 in both flavours, so x = k + 0.5 is an exact tie.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  BlockQ8_0 act, file;
  quant::QuantizeRowQ8_0Act(x.data(), &act, 32);
  quant::QuantizeRowQ8_0(x.data(), &file, 32);
  EXPECT_EQ(act.d, F32ToF16(1.0f));
  EXPECT_EQ(act.qs[0], 127);
  EXPECT_EQ(act.qs[1], 2);
  EXPECT_EQ(act.qs[2], -4);
  EXPECT_EQ(act.qs[3], 0);
  EXPECT_EQ(file.qs[1], 3);
  EXPECT_EQ(file.qs[2], -4);
  EXPECT_EQ(file.qs[3], 1);
  BlockQ8_1 act1;
  quant::QuantizeRowQ8_1Act(x.data(), &act1, 32);
  EXPECT_EQ(act1.s, F32ToF16(127 + 2 - 4 + 0));
  EXPECT_EQ(std::memcmp(act1.qs, act.qs, 32), 0);
}

// The file quantizers' rounding (quant_fit.h RoundHalfAway, in a form that vectorizes) is
// roundf for every 101st float pattern of magnitude below 2^31; every half-integer up to 4096
// and then a sparser series of them up to 2^23, each with its two neighbours; and zeros,
// denormals and the largest float below 1/2.
TEST(QuantizeTest, RoundHalfAwayIsRoundf) {
  auto check = [](float v) {
    ASSERT_EQ(quant::RoundHalfAway(v), static_cast<int32_t>(std::round(v))) << v;
  };
  for (uint32_t bits = 0; bits < 0x4F000000u && !HasFatalFailure(); bits += 101) {
    check(std::bit_cast<float>(bits));
    check(-std::bit_cast<float>(bits));
  }
  for (float h = 0.5f; h < 8388608.0f && !HasFatalFailure();
       h = h < 4096.0f ? h + 1.0f : h * 1.37f + 0.5f) {
    const float tie = std::floor(h) + 0.5f;
    for (float v : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1e30f)}) {
      check(v);
      check(-v);
    }
  }
  for (float v : {0.0f, -0.0f, 0x1.fffffep-2f, -0x1.fffffep-2f, 1e-40f, -1e-40f, 2147483520.0f}) {
    check(v);
  }
}

TEST(QuantizeTest, ActivationConvertersCoverActivationFormats) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ8_1, DType::kQ8_K}) {
    EXPECT_NE(FindActivationQuantizeFn(t), nullptr) << DTypeName(t);
  }
  EXPECT_EQ(FindActivationQuantizeFn(DType::kQ4_0), nullptr);
}

// ---- checked API ----------------------------------------------------------------------------

TEST(QuantizeTest, CheckedApiRejectsBadArguments) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> y(1024);
  EXPECT_EQ(QuantizeRow(DType::kQ4_0, x.data(), y.data(), 33).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(DType::kQ4_K, x.data(), y.data(), 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(DType::kQ8_0, x.data(), y.data(), -32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(DType::kQ8_0, nullptr, y.data(), 32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(DType::kQ5_1, x.data(), y.data(), 32).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(DequantizeRow(DType::kI8, y.data(), x.data(), 32).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(QuantizeRow(DType::kQ8_0, nullptr, nullptr, 0).ok());
  auto r = QuantizeTensor(DType::kQ8_0, x.data(), -1, 32, y.data());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = QuantizeTensor(DType::kQ4_0, x.data(), 2, 31, y.data());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// A block format cannot encode inf or NaN (its scale of an inf is inf, its integers NaN): the
// checked quantizers refuse the row and name the value and its index; the plain-float formats
// carry them.
TEST(QuantizeTest, CheckedApiRefusesNonFiniteRowsForBlockFormats) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> x(512, 0.25f);
    x[300] = bad;
    std::vector<uint8_t> y(4096);
    for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ8_1,
                    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
      const Status s = QuantizeRow(t, x.data(), y.data(), 512);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << DTypeName(t) << " " << bad;
      EXPECT_NE(s.message().find("index 300"), std::string::npos) << s.message();
    }
    std::vector<float> importance(512, 1.0f);
    EXPECT_EQ(QuantizeRowWeighted(DType::kQ4_K, x.data(), y.data(), 512, importance.data()).code(),
              StatusCode::kInvalidArgument);
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      EXPECT_TRUE(QuantizeRow(t, x.data(), y.data(), 512).ok()) << DTypeName(t);
    }
    // QuantizeTensor: the same check per row, naming the row (x is two rows of 256 here).
    auto tensor = QuantizeTensor(DType::kQ8_0, x.data(), 2, 256, y.data());
    ASSERT_FALSE(tensor.ok());
    EXPECT_EQ(tensor.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(tensor.status().message().find("row 1"), std::string::npos)
        << tensor.status().message();
    x[300] = 0.5f;
    EXPECT_TRUE(QuantizeRow(DType::kQ4_K, x.data(), y.data(), 512).ok());
    EXPECT_TRUE(QuantizeTensor(DType::kQ8_0, x.data(), 2, 256, y.data()).ok());
  }
}

// The activation quantizer runs unchecked inside matmuls; a NaN value there (a model gone wrong,
// caught at the logits) becomes -128, as the x86 conversion makes that value, not an undefined
// cast. (Its block's scale is not pinned: the SIMD max may or may not carry the NaN.)
TEST(QuantizeTest, ActivationQ8TurnsANaNValueIntoMinus128) {
  std::vector<float> x(32, 1.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  BlockQ8_0 act;
  quant::QuantizeRowQ8_0Act(x.data(), &act, 32);
  EXPECT_EQ(act.qs[5], -128);
  EXPECT_EQ(act.qs[0], 127);
}

TEST(QuantizeTest, QuantizeTensorLaysOutRowsLikeGguf) {
  const int64_t rows = 3, len = 512;
  const auto x = Gaussian(rows * len, 5);
  for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kF16}) {
    const uint64_t row_bytes = *RowBytes(t, len);
    std::vector<uint8_t> all(rows * row_bytes), one(row_bytes);
    auto written = QuantizeTensor(t, x.data(), rows, len, all.data());
    ASSERT_TRUE(written.ok());
    EXPECT_EQ(*written, rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(QuantizeRow(t, x.data() + r * len, one.data(), len).ok());
      EXPECT_EQ(std::memcmp(one.data(), all.data() + r * row_bytes, row_bytes), 0) << r;
    }
  }
}

}  // namespace
}  // namespace vlmd::engine
