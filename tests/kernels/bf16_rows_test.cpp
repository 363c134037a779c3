// The bf16 row kernels of every table (kernel_table.h: gelu_tanh_fast, to_bf16, f16_to_bf16):
// the fast GELU of the tile epilogue within 1e-4 of the tanh-form GELU and never denormal, and
// the bf16 roundings bit for bit those of the scalar reference.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/kernels/kernel_table.h"
#include "engine/kernels/tile_bf16.h"
#include "engine/tensor/fp16.h"
#include "kernels/op_test_util.h"

namespace vlmd::engine {
namespace {

using vlmd::testing::ForEachTableWith;

// The fast precision's GELU (bf16 or int8 outputs next): within 1e-4 of the tanh-form GELU
// (double) on a wide range, including the far negative tail where it underflows to zero.
void CheckGeluFastIsWithin1e4(const kernels::KernelTable* kt) {
  ASSERT_NE(kt->gelu_tanh_fast, nullptr);
  std::vector<float> x = vlmd::testing::RandomNormal(1000, 41, 3.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 5.0f, -5.0f, 12.0f, -12.0f, 100.0f, -100.0f,
                  1e20f, -1e20f}) {
    x.push_back(v);
  }
  x.push_back(0.5f);  // 1013 values: a masked tail
  std::vector<float> y(x.size());
  kt->gelu_tanh_fast(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    // x sigmoid(2u): no cancellation in the negative tail (exp overflows to inf: -0).
    const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    const double want = v / (1.0 + std::exp(-2.0 * u));
    ASSERT_NEAR(y[i], want, 1e-4 * std::fabs(want) + 1e-30) << "x " << v;
  }
}

TEST(TileBf16Kernel, GeluFastIsWithin1e4) {
  const auto has = [](const kernels::KernelTable& t) { return t.gelu_tanh_fast != nullptr; };
  if (!ForEachTableWith(has, CheckGeluFastIsWithin1e4)) {
    GTEST_SKIP() << "no table of this CPU has the fast GELU";
  }
}

// Where the true GELU is below 2^-126 |x| (x from about -9 to -13), the fast one gives -0 and
// never a denormal: every denormal result costs a microcode assist (~100+ cycles on Intel),
// and the tile epilogue runs this on every FFN value (an up projection measured 3.7x slower
// with denormals in its outputs than without).
void CheckGeluFastNeverDenormal(const kernels::KernelTable* kt) {
  std::vector<float> x;
  for (float v = -14.0f; v <= 0.0f; v += 1.0f / 64) x.push_back(v);
  std::vector<float> y(x.size());
  kt->gelu_tanh_fast(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NE(std::fpclassify(y[i]), FP_SUBNORMAL) << "x " << x[i] << " -> " << y[i];
  }
}

TEST(TileBf16Kernel, GeluFastNeverDenormal) {
  const auto has = [](const kernels::KernelTable& t) { return t.gelu_tanh_fast != nullptr; };
  if (!ForEachTableWith(has, CheckGeluFastNeverDenormal)) {
    GTEST_SKIP() << "no table of this CPU has the fast GELU";
  }
}

void CheckToBf16MatchesTheReferenceRounding(const kernels::KernelTable* kt) {
  std::vector<float> x = vlmd::testing::RandomNormal(1000, 9, 100.0f);
  x[0] = 1.0f + 0x1p-8f;   // a tie: rounds to even (1.0)
  x[1] = 1.0f + 0x1p-7f + 0x1p-8f;  // a tie: rounds up to even
  x[2] = -0.0f;
  x[3] = INFINITY;
  x[4] = std::bit_cast<float>(0x7F800001u);  // a NaN whose payload would round up to inf
  x[5] = std::bit_cast<float>(0xFFFFFFFFu);  // a negative NaN that would carry out of 16 bits
  x[6] = 0x1p-130f;                           // denormals: one that rounds to itself,
  x[7] = -std::bit_cast<float>(0x00408000u);  // a tie (rounds to even),
  x[8] = std::bit_cast<float>(0x007FFFFFu);   // the largest (rounds up to the smallest normal)
  for (int64_t n : {1, 15, 16, 17, 1000}) {
    std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xABCD), want(static_cast<size_t>(n));
    kt->to_bf16(x.data(), got.data(), n);
    kernels::ToBf16Ref(x.data(), want.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // A denormal input may also become its signed zero: vcvtneps2bf16 (AVX512-BF16, AMX
      // machines) treats denormals as zero, where the reference and the FMA tables round them.
      const uint32_t bits = std::bit_cast<uint32_t>(x[static_cast<size_t>(i)]);
      const bool denormal = (bits & 0x7F800000u) == 0 && (bits & 0x007FFFFFu) != 0;
      if (denormal && got[i] == static_cast<uint16_t>(bits >> 16 & 0x8000u)) continue;
      ASSERT_EQ(got[i], want[i]) << "n " << n << " i " << i;
    }
    EXPECT_EQ(got[n], 0xABCD) << "wrote past n";
  }
}

TEST(TileBf16Kernel, ToBf16MatchesTheReferenceRounding) {
  const auto has = [](const kernels::KernelTable& t) { return t.to_bf16 != nullptr; };
  if (!ForEachTableWith(has, CheckToBf16MatchesTheReferenceRounding)) {
    GTEST_SKIP() << "no table of this CPU converts to bf16";
  }
}

// f16 -> bf16 (the tile attention's K/V cache rows): every f16 value converts to the bf16
// rounding of its exact f32 value; NaN stays NaN. Run lengths with a masked tail.
void CheckF16ToBf16RoundsEveryHalfLikeTheF32Path(const kernels::KernelTable* kt) {
  std::vector<uint16_t> all(65536), got(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  kt->f16_to_bf16(all.data(), got.data(), 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(BF16ToF32(got[h]))) << "f16 " << h;
    } else {
      ASSERT_EQ(got[h], F32ToBF16(f)) << "f16 " << h;
    }
  }
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{72}}) {
    std::vector<uint16_t> part(static_cast<size_t>(n) + 3, 0xABCD);
    kt->f16_to_bf16(all.data() + 1000, part.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], got[1000 + i]) << "n " << n;
    for (int64_t i = n; i < n + 3; ++i) ASSERT_EQ(part[i], 0xABCD) << "wrote past n " << n;
  }
}


TEST(TileBf16Kernel, F16ToBf16RoundsEveryHalfLikeTheF32Path) {
  const auto has = [](const kernels::KernelTable& t) { return t.f16_to_bf16 != nullptr; };
  if (!ForEachTableWith(has, CheckF16ToBf16RoundsEveryHalfLikeTheF32Path)) {
    GTEST_SKIP() << "no table of this CPU has an f16 -> bf16 kernel";
  }
}

}  // namespace
}  // namespace vlmd::engine
