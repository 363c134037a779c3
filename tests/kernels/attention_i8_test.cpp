// The fast precision's attention with its scores on int8 (attention_i8.h, the vision encoders
// without AMX): the SIMD quantizers equal the scalar references bit for bit; the op's output
// equals, within the bf16 roundings, attention in double over the reference quantizers'
// integers, and stays close to exact attention; the int8 path is the one
// that runs; non-finite inputs reach the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/attention_i8.h"
#include "engine/kernels/kernel_table.h"
#include "engine/kernels/tile_bf16.h"
#include "engine/ops/attention.h"
#include "kernels/op_test_util.h"

namespace vlmd::testing {
namespace {

using engine::kernels::KernelTable;
using engine::kernels::KeyPanelsI8Bytes;
using engine::kernels::KeyPanelsI8Keys;
using engine::kernels::TileBf16Matrix;
using engine::ops::AttentionArgs;

bool HasInt8Scores(const KernelTable& t) { return t.tile_attention_i8 != nullptr; }

// Bitwise: NaN scales must be NaN in both.
void ExpectSameFloats(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << " " << i << ": " << got[i] << " vs " << want[i];
  }
}

void CheckQuantizersEqualTheReferences(const KernelTable* kt) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int64_t hd : {64, 72, 40, 44}) {  // 44: a tail of 4 in 8-lane steps
    SCOPED_TRACE("hd " + std::to_string(hd));
    const int64_t hd_pad = TileBf16Matrix::PaddedK(hd), stride = hd + 5;
    // Queries: random rows, a row of zeros, rows with an inf and a NaN, a row of one huge value,
    // a row so small that 127 / max overflows (zeros, not NaN casts).
    constexpr int64_t kRows = 9;
    std::vector<float> q = RandomNormal(static_cast<size_t>(kRows * stride), 31, 2.0f);
    std::fill_n(q.begin() + 3 * stride, hd, 0.0f);
    q[4 * stride + hd - 1] = kInf;
    q[5 * stride + 1] = std::nanf("");
    q[6 * stride + 7] = 3e30f;
    std::fill_n(q.begin() + 7 * stride, hd, 1e-38f);
    std::vector<uint8_t> got_q(static_cast<size_t>(kRows * hd_pad), 1), want_q(got_q.size(), 2);
    std::vector<float> got_s(kRows, -1.0f), want_s(kRows, -2.0f);
    kt->quantize_queries_i8(q.data(), stride, kRows, hd, hd_pad, 0.18f, got_q.data(),
                            got_s.data());
    engine::kernels::QuantizeQueriesI8Ref(q.data(), stride, kRows, hd, hd_pad, 0.18f,
                                          want_q.data(), want_s.data());
    ASSERT_EQ(got_q, want_q);
    ExpectSameFloats(got_s, want_s, "query scale");
    EXPECT_TRUE(std::isnan(want_s[4]) && std::isnan(want_s[5]));
    EXPECT_EQ(want_s[3], 0.0f);
    EXPECT_EQ(want_s[7], 0.0f);
    EXPECT_EQ(want_q[7 * hd_pad], 128);

    // Keys: 1, 17 and 40 keys with a common offset in two channels (what the smoothing takes
    // out), and 17 keys of which one holds a NaN.
    for (int64_t n : {1, 17, 40, -17}) {
      const bool nan_key = n < 0;
      n = std::abs(n);
      SCOPED_TRACE("keys " + std::to_string(n) + (nan_key ? " with a NaN" : ""));
      std::vector<float> k = RandomNormal(static_cast<size_t>(n * stride), 77 + n);
      for (int64_t j = 0; j < n; ++j) {
        k[j * stride + 2] += 9.0f;
        k[j * stride + hd - 1] -= 4.0f;
      }
      if (nan_key) k[3 * stride + 5] = std::nanf("");
      const size_t keys = static_cast<size_t>(KeyPanelsI8Keys(n));
      std::vector<int8_t> got_p(KeyPanelsI8Bytes(n, hd_pad), 1), want_p(got_p.size(), 2);
      std::vector<float> got_ks(keys, -1.0f), want_ks(keys, -2.0f);
      std::vector<int32_t> got_b(keys, -1), want_b(keys, -2);
      std::vector<float> mean(static_cast<size_t>(hd_pad));
      kt->pack_keys_i8(k.data(), stride, n, hd, hd_pad, got_p.data(), got_ks.data(),
                       got_b.data(), mean.data());
      engine::kernels::PackKeysI8Ref(k.data(), stride, n, hd, hd_pad, want_p.data(),
                                     want_ks.data(), want_b.data(), mean.data());
      ASSERT_EQ(got_p, want_p);
      ExpectSameFloats(got_ks, want_ks, "key scale");
      ASSERT_EQ(got_b, want_b);
      if (nan_key) {
        EXPECT_TRUE(std::isnan(want_ks[0]));  // the mean carries it to every key
      }
    }
  }
}

TEST(AttentionI8, QuantizersEqualTheReferences) {
  if (!ForEachTableWith(HasInt8Scores, CheckQuantizersEqualTheReferences)) {
    GTEST_SKIP() << "no int8 attention on this CPU";
  }
}

// Self-attention of n rows [n, heads * hd] (f32) in spans, as the vision encoders call it.
struct Problem {
  int64_t n, heads, hd;
  std::vector<float> q, k, v;
};

AttentionArgs Args(const Problem& p, std::span<const engine::ops::RowSpan> spans, float* out,
                   bool int8) {
  AttentionArgs a;
  a.q = p.q.data();
  a.k = p.k.data();
  a.v = p.v.data();
  a.kv_type = engine::DType::kF32;
  a.out = out;
  a.n_q = a.n_kv = p.n;
  a.n_heads = a.n_kv_heads = p.heads;
  a.head_dim = p.hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(p.hd));
  a.spans = spans;
  a.bf16_tiles = true;
  a.int8_scores = int8;
  return a;
}

// Against the format's definition (attention_i8.h) in double: the scores from the reference
// quantizers' integers and scales, then attention in base 2 over them. The kernel adds only
// the bf16 roundings of the probabilities, V and the output (2^-9 (sum p |v| + |o|) each) and
// f32 sums; doubled for margin. And against exact attention in double: the int8 roundings keep
// the output within 3% of max |v| here, on average less than 3x as far from it as the bf16
// path's (random data, scores of std ~2: the rounding errors of the products mostly cancel; the
// worst case, every one aligned, is ~30x that). Keys with a large common offset in
// a channel (the smoothing removes it), head sizes 64 (two 32-step tiles), 80 and 40 (padded).
void CheckMatchesTheInt8Reference(const KernelTable* kt) {
  ThreadPool pool(2);
  double worst_exact_gap = 0, int8_gaps = 0, bf16_gaps = 0;
  for (int64_t hd : {64, 80, 40}) {
    SCOPED_TRACE("hd " + std::to_string(hd));
    Problem p{170, 2, hd, {}, {}, {}};
    const int64_t w = p.heads * hd, hd_pad = TileBf16Matrix::PaddedK(hd);
    p.q = RandomNormal(static_cast<size_t>(p.n * w), 500 + hd, 1.5f);
    p.k = RandomNormal(static_cast<size_t>(p.n * w), 600 + hd, 1.5f);
    p.v = RandomNormal(static_cast<size_t>(p.n * w), 700 + hd, 1.0f, 0.5f);
    for (int64_t j = 0; j < p.n; ++j) p.k[j * w + 3] += 20.0f;  // head 0, channel 3
    const engine::ops::RowSpan spans[] = {{0, 150}, {150, 20}};
    std::vector<float> out(p.q.size(), -7.0f), bf16(p.q.size());
    const AttentionArgs a = Args(p, spans, out.data(), true);
    ASSERT_TRUE(engine::ops::Attention(*kt, &pool, a).ok());
    ASSERT_TRUE(engine::ops::Attention(*kt, &pool, Args(p, spans, bf16.data(), false)).ok());
    const float mul = a.scale * 1.44269504088896341f;  // as the op scales the queries
    for (const engine::ops::RowSpan& span : spans) {
      for (int64_t h = 0; h < p.heads; ++h) {
        const int64_t n = span.len;
        std::vector<uint8_t> qu(static_cast<size_t>(n * hd_pad));
        std::vector<float> qs(static_cast<size_t>(n)), mean(static_cast<size_t>(hd_pad));
        std::vector<int8_t> kp(KeyPanelsI8Bytes(n, hd_pad));
        std::vector<float> ks(static_cast<size_t>(KeyPanelsI8Keys(n)));
        std::vector<int32_t> kb(ks.size());
        const int64_t first = span.start * w + h * hd;
        engine::kernels::QuantizeQueriesI8Ref(p.q.data() + first, w, n, hd, hd_pad, mul,
                                              qu.data(), qs.data());
        engine::kernels::PackKeysI8Ref(p.k.data() + first, w, n, hd, hd_pad, kp.data(),
                                       ks.data(), kb.data(), mean.data());
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> s2(static_cast<size_t>(n)), s(static_cast<size_t>(n));
          for (int64_t j = 0; j < n; ++j) {
            int64_t dot = kb[j];
            double exact = 0;
            for (int64_t d = 0; d < hd; ++d) {
              dot += int64_t{qu[i * hd_pad + d]} * kp[(j / 16) * 16 * hd_pad + (d / 4) * 64 +
                                                      (j % 16) * 4 + d % 4];
              exact += double{a.scale} * p.q[first + i * w + d] * p.k[first + j * w + d];
            }
            s2[j] = static_cast<double>(dot) * ks[j] * qs[i];
            s[j] = exact;
          }
          const double m2 = *std::max_element(s2.begin(), s2.end());
          const double m = *std::max_element(s.begin(), s.end());
          double z2 = 0, z = 0;
          for (int64_t j = 0; j < n; ++j) {
            z2 += std::exp2(s2[j] - m2);
            z += std::exp(s[j] - m);
          }
          for (int64_t d = 0; d < hd; ++d) {
            double o2 = 0, abs_pv = 0, o = 0, v_max = 0;
            for (int64_t j = 0; j < n; ++j) {
              const double v = p.v[first + j * w + d];
              o2 += std::exp2(s2[j] - m2) / z2 * v;
              abs_pv += std::exp2(s2[j] - m2) / z2 * std::fabs(v);
              o += std::exp(s[j] - m) / z * v;
              v_max = std::max(v_max, std::fabs(v));
            }
            const float got = out[first + i * w + d];
            ASSERT_NEAR(got, o2, 2 * 3 * 0x1p-9 * (abs_pv + std::fabs(o2)) + 1e-6)
                << "i=" << i << " h=" << h << " d=" << d;
            worst_exact_gap = std::max(worst_exact_gap, std::fabs(got - o) / v_max);
            int8_gaps += std::fabs(got - o);
            bf16_gaps += std::fabs(bf16[first + i * w + d] - o);
          }
        }
      }
    }
  }
  // Measured: worst 0.020 of max |v|, the mean gap 2.3x the bf16 path's (0.0039 and 0.0017).
  EXPECT_LT(worst_exact_gap, 0.03);
  EXPECT_LT(int8_gaps, 3 * bf16_gaps);
}

TEST(AttentionI8, MatchesTheInt8Reference) {
  if (!ForEachTableWith(HasInt8Scores, CheckMatchesTheInt8Reference)) {
    GTEST_SKIP() << "no int8 attention on this CPU";
  }
}

// A case whose int8 and bf16 answers differ: every query is one large value (channel 0, where
// every key is 0) and small ones that round to 0 on int8 (0.3 of 100 is < half a step). On int8
// every score is then exactly 0 and the output is the mean of V (up to the bf16 roundings of V
// and the output); the bf16 scores keep the small values and weight the keys unevenly. Without
// int8_scores the op takes the bf16 path (shown by its differing answer).
void CheckTheInt8PathRuns(const KernelTable* kt) {
  ThreadPool pool(2);
  Problem p{50, 1, 64, {}, {}, {}};
  p.q.assign(static_cast<size_t>(p.n * p.hd), 0.3f);
  for (int64_t i = 0; i < p.n; ++i) p.q[i * p.hd] = 100.0f;
  p.k = RandomNormal(static_cast<size_t>(p.n * p.hd), 41, 3.0f);
  for (int64_t j = 0; j < p.n; ++j) p.k[j * p.hd] = 0.0f;
  p.v = RandomNormal(static_cast<size_t>(p.n * p.hd), 42);
  const engine::ops::RowSpan spans[] = {{0, p.n}};
  std::vector<float> int8(p.q.size()), bf16(p.q.size());
  ASSERT_TRUE(engine::ops::Attention(*kt, &pool, Args(p, spans, int8.data(), true)).ok());
  ASSERT_TRUE(engine::ops::Attention(*kt, &pool, Args(p, spans, bf16.data(), false)).ok());
  double largest_bf16_gap = 0;
  for (int64_t d = 0; d < p.hd; ++d) {
    double mean = 0, v_max = 0;
    for (int64_t j = 0; j < p.n; ++j) {
      mean += p.v[j * p.hd + d] / p.n;
      v_max = std::max(v_max, std::fabs(static_cast<double>(p.v[j * p.hd + d])));
    }
    for (int64_t i = 0; i < p.n; ++i) {
      ASSERT_NEAR(int8[i * p.hd + d], mean, 0x1p-8 * (std::fabs(mean) + v_max)) << i << "," << d;
      largest_bf16_gap = std::max(largest_bf16_gap, std::fabs(bf16[i * p.hd + d] - mean));
    }
  }
  EXPECT_GT(largest_bf16_gap, 0.05);
}

TEST(AttentionI8, IsThePathThatRuns) {
  if (!ForEachTableWith(HasInt8Scores, CheckTheInt8PathRuns)) {
    GTEST_SKIP() << "no int8 attention on this CPU";
  }
}

// A NaN query makes its own row NaN (the other rows stay finite); an inf key makes every row of
// its span NaN (through the keys' mean); the next span is not touched.
void CheckNonFiniteReachesTheOutput(const KernelTable* kt) {
  ThreadPool pool(2);
  Problem p{60, 1, 64, {}, {}, {}};
  p.q = RandomNormal(static_cast<size_t>(p.n * p.hd), 51);
  p.k = RandomNormal(static_cast<size_t>(p.n * p.hd), 52);
  p.v = RandomNormal(static_cast<size_t>(p.n * p.hd), 53);
  p.q[7 * p.hd + 9] = std::nanf("");
  p.k[45 * p.hd + 2] = std::numeric_limits<float>::infinity();
  const engine::ops::RowSpan spans[] = {{0, 40}, {40, 20}};
  std::vector<float> out(p.q.size());
  ASSERT_TRUE(engine::ops::Attention(*kt, &pool, Args(p, spans, out.data(), true)).ok());
  for (int64_t i = 0; i < p.n; ++i) {
    const bool want_nan = i == 7 || i >= 40;
    for (int64_t d = 0; d < p.hd; ++d) {
      ASSERT_EQ(std::isnan(out[i * p.hd + d]), want_nan) << "i=" << i << " d=" << d;
    }
  }
}

TEST(AttentionI8, NonFiniteInputsReachTheOutput) {
  if (!ForEachTableWith(HasInt8Scores, CheckNonFiniteReachesTheOutput)) {
    GTEST_SKIP() << "no int8 attention on this CPU";
  }
}

}  // namespace
}  // namespace vlmd::testing
