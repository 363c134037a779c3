// The ops layer: shape validation, row/range splitting over the ThreadPool (bitwise equal to
// one thread), RoPE against ggml's definition evaluated in double, and the NaN/Inf check (E7).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/ops/activation.h"
#include "engine/ops/norm.h"
#include "engine/ops/parallel.h"
#include "engine/ops/numerics.h"
#include "engine/ops/rope.h"
#include "engine/ops/softmax.h"
#include "engine/tensor/fp16.h"
#include "kernels/op_test_util.h"

namespace vlmd::testing {
namespace {

using engine::kernels::GetKernelTable;
using engine::kernels::Isa;
using engine::kernels::IsaName;
using engine::kernels::KernelTable;
namespace ops = engine::ops;

TEST(Ops, RowOpsSplitOverThreadsExactly) {
  ThreadPool pool(3);
  const int64_t n_rows = 67, n = 1000;
  const auto x = RandomNormal(n_rows * n, 1, 2.0f);
  const auto w = RandomNormal(n, 2);
  const auto b = RandomNormal(n, 3);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& kt = GetKernelTable(isa);
    SCOPED_TRACE(std::string(IsaName(isa)));
    std::vector<float> want(x.size()), got(x.size());
    // Each row computed directly by the kernel is the expectation, bit for bit.
    for (int64_t r = 0; r < n_rows; ++r) kt.rms_norm(&x[r * n], w.data(), &want[r * n], n, 1e-6f);
    ASSERT_TRUE(ops::RmsNorm(kt, &pool, x.data(), w.data(), got.data(), n_rows, n, 1e-6f).ok());
    EXPECT_EQ(got, want);

    for (int64_t r = 0; r < n_rows; ++r) {
      kt.layer_norm(&x[r * n], w.data(), b.data(), &want[r * n], n, 1e-5f);
    }
    ASSERT_TRUE(
        ops::LayerNorm(kt, &pool, x.data(), w.data(), b.data(), got.data(), n_rows, n, 1e-5f)
            .ok());
    EXPECT_EQ(got, want);
    ASSERT_NE(kt.to_bf16, nullptr) << "every table converts to bf16";
    {
      // bf16 rows with a stride: each the kernel's row rounded to nearest even, the padding
      // between rows untouched.
      const int64_t ldy = n + 24;
      std::vector<uint16_t> got16(static_cast<size_t>(n_rows * ldy), 0xABCD);
      ASSERT_TRUE(ops::LayerNormToBf16(kt, &pool, x.data(), w.data(), b.data(), got16.data(), ldy,
                                       n_rows, n, 1e-5f)
                      .ok());
      for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t c = 0; c < ldy; ++c) {
          const uint16_t g = got16[static_cast<size_t>(r * ldy + c)];
          ASSERT_EQ(g, c < n ? engine::F32ToBF16(want[r * n + c]) : 0xABCD) << r << "," << c;
        }
      }
      EXPECT_FALSE(ops::LayerNormToBf16(kt, &pool, x.data(), w.data(), b.data(), got16.data(),
                                        n - 1, n_rows, n, 1e-5f)
                       .ok());
    }

    want = x;
    for (int64_t r = 0; r < n_rows; ++r) kt.softmax(&want[r * n], n);
    ASSERT_TRUE(ops::Softmax(kt, &pool, x.data(), got.data(), n_rows, n).ok());
    EXPECT_EQ(got, want);
    std::vector<float> inplace = x;  // y == x
    ASSERT_TRUE(ops::Softmax(kt, &pool, inplace.data(), inplace.data(), n_rows, n).ok());
    EXPECT_EQ(inplace, want);
  }
}

// ForRanges' shrinking ranges cover every item exactly once, start on the alignment, and shrink.
TEST(Ops, ForRangesCoversEachItemOnceInShrinkingAlignedRanges) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 15, 36, 37, 1000, 100003}) {
      for (int64_t align : {1, 16}) {
        std::vector<int> seen(static_cast<size_t>(n), 0);
        std::vector<std::pair<int64_t, int64_t>> ranges;
        std::mutex mu;
        ops::internal::ForRanges(&pool, n, 1 << 15, align, [&](int64_t b, int64_t e) {
          std::lock_guard<std::mutex> lock(mu);
          ranges.emplace_back(b, e);
          for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i)];
        });
        SCOPED_TRACE("threads " + std::to_string(threads) + " n " + std::to_string(n) +
                     " align " + std::to_string(align));
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "item " << i;
        std::sort(ranges.begin(), ranges.end());
        for (size_t r = 0; r < ranges.size(); ++r) {
          EXPECT_EQ(ranges[r].first % align, 0);
          // Ranges shrink (up to one unit of rounding); the last may be cut short by n.
          if (r + 2 < ranges.size()) {
            EXPECT_GE(ranges[r].second - ranges[r].first + align,
                      ranges[r + 1].second - ranges[r + 1].first);
          }
        }
        if (n >= 1000) {
          ASSERT_GT(ranges.size(), static_cast<size_t>(threads));
          const auto size = [&](size_t r) { return ranges[r].second - ranges[r].first; };
          EXPECT_GE(size(0), 3 * size(ranges.size() - 2)) << "the ranges do not shrink";
        }
      }
    }
  }
}

TEST(Ops, ActivationsSplitOverThreadsExactly) {
  ThreadPool pool(2);
  const int64_t n = 100003;  // not a multiple of the range alignment
  const auto x = RandomNormal(n, 4, 3.0f);
  const auto up = RandomNormal(n, 5);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& kt = GetKernelTable(isa);
    for (auto act : {ops::Activation::kGeluTanh, ops::Activation::kGeluErf,
                     ops::Activation::kGeluQuick, ops::Activation::kSilu}) {
      std::vector<float> single(n), threaded(n);
      ASSERT_TRUE(ops::Activate(kt, nullptr, act, x.data(), single.data(), n).ok());
      ASSERT_TRUE(ops::Activate(kt, &pool, act, x.data(), threaded.data(), n).ok());
      EXPECT_EQ(single, threaded) << IsaName(isa) << " " << ops::ActivationName(act);
      ASSERT_TRUE(ops::ParseActivation(ops::ActivationName(act)).has_value());
      EXPECT_EQ(*ops::ParseActivation(ops::ActivationName(act)), act);
    }
    std::vector<float> single(n), threaded(n);
    kt.swiglu(x.data(), up.data(), single.data(), n);
    ASSERT_TRUE(ops::SwiGlu(kt, &pool, x.data(), up.data(), threaded.data(), n).ok());
    EXPECT_EQ(single, threaded) << IsaName(isa) << " swiglu";
    // Rows of a fused [gate | up] projection: row r's halves, the same function.
    const int64_t rows = 40, ff = 1001;  // 2 * rows * ff <= n
    std::vector<float> fused_rows(rows * ff);
    ASSERT_TRUE(ops::SwiGluRows(kt, &pool, x.data(), rows, ff, fused_rows.data()).ok());
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> want(ff);
      kt.swiglu(x.data() + r * 2 * ff, x.data() + r * 2 * ff + ff, want.data(), ff);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), fused_rows.begin() + r * ff))
          << IsaName(isa) << " swiglu row " << r;
    }
  }
  EXPECT_FALSE(ops::ParseActivation("relu").has_value());
}

TEST(Ops, RejectBadShapes) {
  const KernelTable& kt = GetKernelTable(Isa::kRef);
  std::vector<float> buf(64);
  float* p = buf.data();
  auto invalid = [](const Status& st) { return st.code() == StatusCode::kInvalidArgument; };
  EXPECT_TRUE(invalid(ops::RmsNorm(kt, nullptr, p, nullptr, p, 2, 0, 1e-6f)));
  EXPECT_TRUE(invalid(ops::RmsNorm(kt, nullptr, p, nullptr, p, -1, 8, 1e-6f)));
  EXPECT_TRUE(invalid(ops::RmsNorm(kt, nullptr, nullptr, nullptr, p, 2, 8, 1e-6f)));
  EXPECT_TRUE(invalid(ops::RmsNorm(kt, nullptr, p, nullptr, p, 2, 8, -1.0f)));
  EXPECT_TRUE(invalid(ops::LayerNorm(kt, nullptr, p, nullptr, nullptr, nullptr, 2, 8, 1e-5f)));
  EXPECT_TRUE(invalid(ops::Softmax(kt, nullptr, p, p, 1, 0)));
  EXPECT_TRUE(invalid(ops::Activate(kt, nullptr, ops::Activation::kSilu, p, p, -3)));
  EXPECT_TRUE(invalid(ops::SwiGlu(kt, nullptr, p, nullptr, p, 8)));
  EXPECT_TRUE(invalid(ops::SwiGluRows(kt, nullptr, nullptr, 2, 8, p)));
  EXPECT_TRUE(invalid(ops::SwiGluRows(kt, nullptr, p, -1, 8, p)));
  // Empty work is fine.
  EXPECT_TRUE(ops::RmsNorm(kt, nullptr, p, nullptr, p, 0, 8, 1e-6f).ok());
  EXPECT_TRUE(ops::Activate(kt, nullptr, ops::Activation::kSilu, nullptr, nullptr, 0).ok());

  ops::RopeParams rp;
  std::vector<int32_t> pos(2, 0);
  rp.n_rot = 7;  // odd
  EXPECT_TRUE(invalid(ops::Rope(kt, nullptr, rp, p, 2, 2, 16, pos.data())));
  rp.n_rot = 18;  // > head_dim
  EXPECT_TRUE(invalid(ops::Rope(kt, nullptr, rp, p, 2, 2, 16, pos.data())));
  rp.n_rot = 16;
  rp.freq_base = 0.0f;
  EXPECT_TRUE(invalid(ops::Rope(kt, nullptr, rp, p, 2, 2, 16, pos.data())));
  rp.freq_base = 10000.0f;
  EXPECT_TRUE(invalid(ops::Rope(kt, nullptr, rp, p, 2, 2, 16, nullptr)));
  EXPECT_TRUE(invalid(ops::RopeWithTable(kt, nullptr, p, 2, 2, 16, 20, p, 16, false)));
  EXPECT_TRUE(ops::Rope(kt, nullptr, rp, p, 2, 2, 16, pos.data()).ok());
}

// ggml_rope_ext (ext_factor 0, attn_factor 1) written out in double: pair i of a head turns by
// theta_i = pos * freq_scale * base^(-2i/n_rot) / ff_i; "normal" pairs are (2i, 2i+1), "neox"
// pairs (i, i + n_rot/2); dims >= n_rot pass through.
std::vector<double> RopeDouble(const std::vector<float>& x, const std::vector<int32_t>& pos,
                               int64_t n_heads, int64_t head_dim, const ops::RopeParams& p) {
  std::vector<double> y(x.begin(), x.end());
  const int64_t half = p.n_rot / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t base = (static_cast<int64_t>(t) * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double ff = p.freq_factors ? p.freq_factors[i] : 1.0;
        const double theta = pos[t] * static_cast<double>(p.freq_scale) /
                             (ff * std::pow(static_cast<double>(p.freq_base), 2.0 * i / p.n_rot));
        const int64_t i0 = base + (p.neox ? i : 2 * i), i1 = base + (p.neox ? i + half : 2 * i + 1);
        y[i0] = x[i0] * std::cos(theta) - x[i1] * std::sin(theta);
        y[i1] = x[i0] * std::sin(theta) + x[i1] * std::cos(theta);
      }
    }
  }
  return y;
}

TEST(Ops, RopeMatchesGgmlDefinition) {
  ThreadPool pool(2);
  const int64_t n_tokens = 11, n_heads = 4, head_dim = 64;
  const std::vector<int32_t> positions = {0, 1, 2, 7, 100, 101, 511, 4095, 5000, 32767, 3};
  std::vector<float> factors(32);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i);
  for (Isa isa : AvailableIsas()) {
    for (int64_t n_rot : {64, 32}) {
      for (bool neox : {false, true}) {
        for (bool scaled : {false, true}) {
          ops::RopeParams rp;
          rp.n_rot = n_rot;
          rp.neox = neox;
          rp.freq_base = scaled ? 500000.0f : 10000.0f;
          rp.freq_scale = scaled ? 0.25f : 1.0f;
          rp.freq_factors = scaled ? factors.data() : nullptr;
          const auto x = RandomNormal(n_tokens * n_heads * head_dim, 8 + n_rot);
          std::vector<float> y = x;
          ASSERT_TRUE(ops::Rope(GetKernelTable(isa), &pool, rp, y.data(), n_tokens, n_heads,
                                head_dim, positions.data())
                          .ok());
          const auto want = RopeDouble(x, positions, n_heads, head_dim, rp);
          const std::string vars = std::string(IsaName(isa)) + " n_rot=" +
                                   std::to_string(n_rot) + (neox ? " neox" : " normal") +
                                   (scaled ? " scaled" : "");
          for (size_t e = 0; e < y.size(); ++e) {
            const int64_t d = static_cast<int64_t>(e) % head_dim;
            if (d >= n_rot) {
              ASSERT_EQ(y[e], x[e]) << vars << " e=" << e;
              continue;
            }
            // Table entries carry one rounding (u), the kernel three (vs the exact product):
            // 4u of |x0| + |x1| <= 2 max|x| of the pair; bound it by the row's max magnitude.
            const int64_t head0 = static_cast<int64_t>(e) - d;
            double mag = 0;
            for (int64_t k = 0; k < n_rot; ++k) {
              mag = std::max<double>(mag, std::fabs(x[head0 + k]));
            }
            ASSERT_NEAR(y[e], want[e], 8 * kU * mag + kTiny) << vars << " e=" << e;
          }
        }
      }
    }
  }
}

TEST(Ops, RopeWithTableOnFusedQkvTouchesOnlyItsHeads) {
  const KernelTable& kt = GetKernelTable(engine::kernels::BestAvailableIsa());
  const int64_t n_tokens = 5, n_heads = 2, head_dim = 16, stride = 3 * n_heads * head_dim;
  ops::RopeParams rp;
  rp.n_rot = head_dim;
  rp.neox = true;
  const std::vector<int32_t> pos = {3, 4, 5, 6, 7};
  std::vector<float> table(n_tokens * rp.n_rot);
  ASSERT_TRUE(ops::BuildRopeTable(rp, pos.data(), n_tokens, table.data()).ok());
  const auto qkv = RandomNormal(n_tokens * stride, 9);
  std::vector<float> got = qkv;
  ASSERT_TRUE(
      ops::RopeWithTable(kt, nullptr, got.data(), n_tokens, n_heads, head_dim, stride,
                         table.data(), rp.n_rot, rp.neox)
          .ok());
  // The same rotation on a compact copy of the q part.
  std::vector<float> q(n_tokens * n_heads * head_dim);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::copy_n(&qkv[t * stride], n_heads * head_dim, &q[t * n_heads * head_dim]);
  }
  ASSERT_TRUE(ops::Rope(kt, nullptr, rp, q.data(), n_tokens, n_heads, head_dim, pos.data()).ok());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t e = 0; e < stride; ++e) {
      const float v = got[t * stride + e];
      if (e < n_heads * head_dim) {
        ASSERT_EQ(v, q[t * n_heads * head_dim + e]) << "t=" << t << " e=" << e;
      } else {
        ASSERT_EQ(v, qkv[t * stride + e]) << "k/v part changed, t=" << t << " e=" << e;
      }
    }
  }
}

// Multi-section RoPE: the sections FAMILIES.md lists for real models and the fixtures, written
// out pair by pair from llama.cpp's rule (Qwen2-VL blocks t|h|w|e; Qwen3-VL interleaved).
TEST(Ops, RopeSectionsAssignPairsAsLlamaCpp) {
  ops::RopeParams blocks;
  blocks.sections = {2, 3, 3, 0};  // tiny-qwen2vl, n_rot 16
  std::vector<int> got;
  for (int64_t j = 0; j < 8; ++j) got.push_back(ops::RopeSectionOfPair(blocks, j));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2}));
  ops::RopeParams inter;
  inter.interleaved = true;
  inter.sections = {4, 2, 2, 0};  // tiny-qwen3vl: pair 7 falls to e (FAMILIES.md)
  got.clear();
  for (int64_t j = 0; j < 8; ++j) got.push_back(ops::RopeSectionOfPair(inter, j));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 3}));
  inter.sections = {24, 20, 20, 0};  // Qwen3-VL: pairs 61 and 62 fall to e, 60 is t
  EXPECT_EQ(ops::RopeSectionOfPair(inter, 59), 2);
  EXPECT_EQ(ops::RopeSectionOfPair(inter, 60), 0);
  EXPECT_EQ(ops::RopeSectionOfPair(inter, 61), 3);
  EXPECT_EQ(ops::RopeSectionOfPair(inter, 62), 3);
  EXPECT_EQ(ops::RopeSectionOfPair(inter, 63), 0);
}

TEST(Ops, MultiSectionRopeTableUsesEachPairsPosition) {
  for (bool interleaved : {false, true}) {
    ops::RopeParams rp;
    rp.n_rot = 16;
    rp.neox = true;
    rp.freq_base = 10000.0f;
    rp.interleaved = interleaved;
    rp.sections = interleaved ? std::array<int32_t, 4>{4, 2, 2, 0} : std::array<int32_t, 4>{2, 3, 3, 0};
    const std::vector<int32_t> pos4 = {7, 7, 7, 7, 4, 5, 9, 0, 30, 31, 33, 0};  // [3 tokens, 4]
    std::vector<float> table(3 * 16);
    ASSERT_TRUE(ops::BuildRopeTable(rp, pos4.data(), 3, table.data(), 4).ok());
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t j = 0; j < 8; ++j) {
        const double theta = pos4[t * 4 + ops::RopeSectionOfPair(rp, j)] *
                             std::pow(10000.0, -2.0 * static_cast<double>(j) / 16.0);
        EXPECT_EQ(table[t * 16 + j], static_cast<float>(std::cos(theta))) << t << " " << j;
        EXPECT_EQ(table[t * 16 + 8 + j], static_cast<float>(std::sin(theta))) << t << " " << j;
      }
    }
    // One position per token (text rows): exactly the one-position table.
    const std::vector<int32_t> pos1 = {7, 12, 40};
    std::vector<float> broadcast(3 * 16), plain(3 * 16);
    ASSERT_TRUE(ops::BuildRopeTable(rp, pos1.data(), 3, broadcast.data(), 1).ok());
    ops::RopeParams one = rp;
    one.sections = {};
    ASSERT_TRUE(ops::BuildRopeTable(one, pos1.data(), 3, plain.data()).ok());
    EXPECT_EQ(broadcast, plain);
    // Four positions need sections.
    EXPECT_FALSE(ops::BuildRopeTable(one, pos4.data(), 3, plain.data(), 4).ok());
  }
}

// rope.scaling.attn_factor (ggml rope's mscale): every cos and sin of the table times the
// factor, so the rotated values scale and the rest of the head does not; <= 0 is refused.
TEST(Ops, RopeAttnFactorScalesTheRotatedValuesOnly) {
  ops::RopeParams rp;
  rp.n_rot = 8;
  rp.neox = true;
  const std::vector<int32_t> pos = {0, 3, 17};
  std::vector<float> plain(3 * 8), scaled(3 * 8);
  ASSERT_TRUE(ops::BuildRopeTable(rp, pos.data(), 3, plain.data()).ok());
  rp.attn_factor = 1.5f;
  ASSERT_TRUE(ops::BuildRopeTable(rp, pos.data(), 3, scaled.data()).ok());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(scaled[i], plain[i] * 1.5f) << i;
  // A head of 12 with 8 rotated: at position 0 (cos 1, sin 0) the rotated 8 are x * 1.5.
  const KernelTable& kt = GetKernelTable(Isa::kRef);
  std::vector<float> x(12);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 1.0f;
  const std::vector<float> before = x;
  ASSERT_TRUE(ops::RopeWithTable(kt, nullptr, x.data(), 1, 1, 12, 0, scaled.data(), 8, true).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], i < 8 ? before[i] * 1.5f : before[i]) << i;
  rp.attn_factor = 0.0f;
  EXPECT_FALSE(ops::BuildRopeTable(rp, pos.data(), 3, scaled.data()).ok());
}

TEST(Numerics, CheckFiniteNamesTheTensorAndIndex) {
  std::vector<float> x = RandomNormal(5000, 10);
  x[17] = std::numeric_limits<float>::denorm_min();
  x[18] = std::numeric_limits<float>::max();
  x[19] = -std::numeric_limits<float>::max();
  EXPECT_TRUE(ops::CheckFinite(x.data(), 5000, "ok").ok());
  EXPECT_TRUE(ops::CheckFinite(nullptr, 0, "empty").ok());

  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  const char* bad_names[] = {"nan", "inf", "-inf"};
  for (int k = 0; k < 3; ++k) {
    for (int64_t at : {int64_t{0}, int64_t{1023}, int64_t{1024}, int64_t{4999}}) {
      std::vector<float> y = x;
      y[at] = bad_values[k];
      if (at + 7 < 5000) y[at + 7] = bad_values[k];  // the first one is reported
      Status st = ops::CheckFinite(y.data(), 5000, "blk.3.ffn_out");
      ASSERT_EQ(st.code(), StatusCode::kInternal) << bad_names[k] << " at " << at;
      const std::string& m = st.message();
      EXPECT_NE(m.find("'blk.3.ffn_out'"), std::string::npos) << m;
      EXPECT_NE(m.find("index " + std::to_string(at) + " "), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("value ") + bad_names[k] + " "), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace vlmd::testing
