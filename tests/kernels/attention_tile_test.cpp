// The fast precision's bf16 flash attention (every x86 SIMD table: FMAs, vdpbf16ps or AMX tiles;
// every arm64 table: NEON FMAs)
// against attention in double within the bf16 roundings, its rows independent of the call, and
// self-attention in row spans (the vision encoders') on the f32 and bf16 paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/ops/attention.h"
#include "engine/tensor/fp16.h"
#include "kernels/attention_test_util.h"
#include "kernels/op_test_util.h"

namespace vlmd::testing {
namespace {

// The fast precision's tile path (bf16_tiles, x86 from avx2 up) against attention in double over
// the op's own f32 / f16 values: within the bf16 roundings it adds. With u = 2^-9 (bf16), q and k
// rounded make each score err by <= 2u sum_d |scale q_d k_jd| (S), weights by twice that, the
// weighted mean by <= 4u S * 2 max|v|; v, the probabilities and the output rounded add
// u (sum p |v| + |o|) each; doubled for margin. Cases: causal GQA after a history (two query
// blocks, a head-major cache); MQA with head_dim 72 (three tile steps per score) and its first
// queries before every key (zeros); unmasked with head_dim 48; a single query row.
void CheckTilePathStaysWithinBf16Rounding(const KernelTable* kt) {
  ThreadPool pool(2);
  std::vector<Case> cases = {{"tiles causal", 150, 190, 9, 3, 64, true, 40, /*head_major=*/true},
                             {"tiles mqa hd72", 20, 45, 4, 1, 72, true, -3},
                             {"tiles unmasked", 40, 70, 4, 2, 48, false},
                             {"tiles one row", 1, 33, 6, 2, 64, true, 32}};
  // Sliding windows: a prompt after 150 keys whose rows' windows start in the second and third
  // chunks of 128 keys; a ring that wrapped (positions 200..375 rotated in 176 rows: the kernel
  // reads them from position 128, 72 keys of zero padding); rows of a bidirectional span.
  cases.push_back({"tiles window", 150, 300, 4, 2, 64, true, 150});
  cases.back().window = 100;
  cases.push_back({"tiles window ring", 40, 176, 4, 2, 64, true, 336});
  cases.back().window = 130;
  cases.back().ring_first_pos = 200;
  cases.push_back({"tiles window span", 20, 60, 4, 2, 32, true, 40});
  cases.back().window = 12;
  cases.back().one_span = true;
  for (const Case& c : cases) {
    for (DType kv : {DType::kF16, DType::kF32}) {
      Problem p = Make(c, kv, 77);
      AttentionArgs a = p.args;
      a.bf16_tiles = true;
      std::vector<float> out(static_cast<size_t>(c.n_q * c.n_heads * c.head_dim), -7.0f);
      a.out = out.data();
      ASSERT_TRUE(engine::ops::Attention(*kt, &pool, a).ok());
      const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
      constexpr double u = 0x1p-9;
      for (int64_t i = 0; i < c.n_q; ++i) {
        for (int64_t h = 0; h < c.n_heads; ++h) {
          const float* q = p.q_buf.data() + (i * c.n_heads + h) * hd;
          std::vector<double> s;
          std::vector<int64_t> rows;
          double big_s = 0;
          for (int64_t j = 0; j < c.n_kv; ++j) {
            if (c.causal && p.kv_pos[j] > p.q_pos[i]) continue;
            if (c.window > 0 && p.q_win_pos[i] - p.kv_pos[j] >= c.window) continue;
            const float* k = p.k_vals.data() + (j * c.n_kv_heads + h / group) * hd;
            double dot = 0, mag = 0;
            for (int64_t d = 0; d < hd; ++d) {
              dot += static_cast<double>(a.scale) * q[d] * k[d];
              mag += std::fabs(static_cast<double>(a.scale) * q[d] * k[d]);
            }
            s.push_back(dot);
            rows.push_back(j);
            big_s = std::max(big_s, mag);
          }
          const float* got = out.data() + (i * c.n_heads + h) * hd;
          if (rows.empty()) {  // sees no key: zeros
            for (int64_t d = 0; d < hd; ++d) ASSERT_EQ(got[d], 0.0f) << c.name << " i=" << i;
            continue;
          }
          const double m = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (double x : s) z += std::exp(x - m);
          for (int64_t d = 0; d < hd; ++d) {
            double o = 0, abs_pv = 0, v_max = 0;
            for (size_t r = 0; r < rows.size(); ++r) {
              const double v = p.v_vals[(rows[r] * c.n_kv_heads + h / group) * hd + d];
              o += std::exp(s[r] - m) / z * v;
              abs_pv += std::exp(s[r] - m) / z * std::fabs(v);
              v_max = std::max(v_max, std::fabs(v));
            }
            const double tol = 2 * (4 * u * big_s * 2 * v_max + 3 * u * (abs_pv + std::fabs(o)));
            ASSERT_NEAR(got[d], o, tol) << c.name << " kv=" << engine::DTypeName(kv)
                                        << " i=" << i << " h=" << h << " d=" << d;
          }
        }
      }
    }
  }
}

// Every x86 SIMD table (FMAs, vdpbf16ps, AMX).
TEST(Attention, TilePathStaysWithinBf16Rounding) {
  const auto has = [](const KernelTable& t) { return t.tile_attention != nullptr; };
  if (!ForEachTableWith(has, CheckTilePathStaysWithinBf16Rounding)) {
    GTEST_SKIP() << "no bf16 attention kernel on this CPU";
  }
}


// Self-attention in spans, as the vision encoders use it: q, k and v are the same n rows
// [n, heads * hd] (f32) and row i attends within its span only.
struct SpanProblem {
  int64_t n = 0, heads = 0, hd = 0;
  std::vector<float> q, k, v;  // [n, heads * hd]
};

SpanProblem MakeSpanProblem(int64_t n, int64_t heads, int64_t hd, uint32_t seed) {
  SpanProblem p{n, heads, hd, {}, {}, {}};
  p.q = RandomNormal(static_cast<size_t>(n * heads * hd), seed);
  p.k = RandomNormal(static_cast<size_t>(n * heads * hd), seed + 1);
  p.v = RandomNormal(static_cast<size_t>(n * heads * hd), seed + 2, 1.0f, 0.5f);
  return p;
}

// Naive double attention of row i, head h, over the rows of `span`; *v_max: the largest |v|.
std::vector<double> NaiveSpanRow(const SpanProblem& p, const RowSpan& span, int64_t i, int64_t h,
                                 double scale, double* v_max) {
  const int64_t w = p.heads * p.hd;
  std::vector<double> s;
  for (int64_t j = span.start; j < span.start + span.len; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < p.hd; ++d) dot += scale * p.q[i * w + h * p.hd + d] * p.k[j * w + h * p.hd + d];
    s.push_back(dot);
  }
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0;
  for (double x : s) z += std::exp(x - m);
  std::vector<double> o(static_cast<size_t>(p.hd), 0.0);
  *v_max = 0;
  for (int64_t j = 0; j < span.len; ++j) {
    for (int64_t d = 0; d < p.hd; ++d) {
      const double v = p.v[(span.start + j) * w + h * p.hd + d];
      o[d] += std::exp(s[j] - m) / z * v;
      *v_max = std::max(*v_max, std::fabs(v));
    }
  }
  return o;
}

// Spans of 5 (the streaming path), 40 and 20 rows (the blocked path) with rows 65..69 in none:
// every ISA, f32 operands; a row outside every span is left as it was.
TEST(Attention, SpansAttendWithinTheirOwnRowsOnly) {
  const SpanProblem p = MakeSpanProblem(70, 3, 24, 500);
  const RowSpan spans[] = {{0, 5}, {5, 40}, {45, 20}};
  const int64_t w = p.heads * p.hd;
  ThreadPool pool(2);
  for (Isa isa : AvailableIsas()) {
    std::vector<float> out(static_cast<size_t>(p.n * w), -7.0f);
    AttentionArgs a;
    a.q = p.q.data();
    a.k = p.k.data();
    a.v = p.v.data();
    a.kv_type = DType::kF32;
    a.out = out.data();
    a.n_q = a.n_kv = p.n;
    a.n_heads = a.n_kv_heads = p.heads;
    a.head_dim = p.hd;
    a.scale = 1.0f / std::sqrt(static_cast<float>(p.hd));
    a.spans = spans;
    ASSERT_TRUE(engine::ops::Attention(GetKernelTable(isa), &pool, a).ok()) << IsaName(isa);
    for (const RowSpan& span : spans) {
      for (int64_t i = span.start; i < span.start + span.len; ++i) {
        for (int64_t h = 0; h < p.heads; ++h) {
          double v_max = 0;
          const std::vector<double> want = NaiveSpanRow(p, span, i, h, a.scale, &v_max);
          for (int64_t d = 0; d < p.hd; ++d) {
            ASSERT_NEAR(out[i * w + h * p.hd + d], want[d], 1e-5 * (1 + v_max))
                << IsaName(isa) << " span at " << span.start << " i=" << i << " h=" << h;
          }
        }
      }
    }
    for (int64_t e = 65 * w; e < p.n * w; ++e) ASSERT_EQ(out[e], -7.0f) << IsaName(isa);
  }
}

// The vision encoders' tile path: bf16 q (pre-scaled by scale * log2(e)), k, v and out rows at a
// stride wider than the heads, in spans; head_dim 64 reads the queries in place, 40 copies them.
void CheckBf16OperandsOnTilesInSpans(const KernelTable* kt) {
  ThreadPool pool(2);
  for (int64_t hd : {64, 40}) {
    SpanProblem p = MakeSpanProblem(150, 2, hd, 900 + static_cast<uint32_t>(hd));
    const int64_t w = p.heads * hd, ld = w + 32, rows = p.n + 32;  // 32 readable rows past the end
    // The values the op sees: bf16. The reference reads the same rounded values.
    for (std::vector<float>* x : {&p.q, &p.k, &p.v}) {
      for (float& f : *x) f = engine::BF16ToF32(engine::F32ToBF16(f));
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const float q_mult = static_cast<float>(scale * 1.4426950408889634);
    std::vector<uint16_t> q16(static_cast<size_t>(rows * ld), 0), k16(q16.size(), 0),
        v16(q16.size(), 0), out16(q16.size(), 0x7fc0);  // out: NaN where nothing is written
    for (int64_t r = 0; r < p.n; ++r) {
      for (int64_t e = 0; e < w; ++e) {
        q16[r * ld + e] = engine::F32ToBF16(p.q[r * w + e] * q_mult);
        k16[r * ld + e] = engine::F32ToBF16(p.k[r * w + e]);
        v16[r * ld + e] = engine::F32ToBF16(p.v[r * w + e]);
      }
    }
    // The reference takes the queries the kernel sees: bf16(q * q_mult) / q_mult.
    for (int64_t r = 0; r < p.n; ++r) {
      for (int64_t e = 0; e < w; ++e) p.q[r * w + e] = engine::BF16ToF32(q16[r * ld + e]) / q_mult;
    }
    const RowSpan spans[] = {{0, 130}, {130, 20}};
    AttentionArgs a;
    a.q_bf16 = q16.data();
    a.k = k16.data();
    a.v = v16.data();
    a.kv_type = DType::kBF16;
    a.out_bf16 = out16.data();
    a.n_q = a.n_kv = p.n;
    a.n_heads = a.n_kv_heads = p.heads;
    a.head_dim = hd;
    a.q_row_stride = a.out_row_stride = a.kv_row_stride = ld;
    a.scale = 1.0f;
    a.spans = spans;
    a.bf16_tiles = true;
    ASSERT_TRUE(engine::ops::Attention(*kt, &pool, a).ok());
    for (const RowSpan& span : spans) {
      for (int64_t i = span.start; i < span.start + span.len; ++i) {
        for (int64_t h = 0; h < p.heads; ++h) {
          double v_max = 0;
          const std::vector<double> want = NaiveSpanRow(p, span, i, h, scale, &v_max);
          for (int64_t d = 0; d < hd; ++d) {
            // Probabilities and the output are rounded to bf16 (8 bits): a few units of 2^-9.
            ASSERT_NEAR(engine::BF16ToF32(out16[i * ld + h * hd + d]), want[d], 0x1p-6 * v_max)
                << "hd=" << hd << " i=" << i << " h=" << h << " d=" << d;
          }
        }
      }
      for (int64_t e = w; e < ld; ++e) {  // the gap after the heads stays untouched
        ASSERT_EQ(out16[span.start * ld + e], 0x7fc0) << "hd=" << hd << " e=" << e;
      }
    }
  }
}

// The tile path's promise to the decoder: a prompt row's output is the same bits however the
// prompt is cut into calls and whatever rows hold its keys. 100 queries at positions 300..399
// with a sliding window of 150 over 400 positions, answered (a) in one call over a plain cache
// of positions 0..399, (b) in calls of 37 rows over the plain cache as it fills, and (c) in the
// same calls over a ring of 187 rows (window + 37, not a multiple of the kernel's 128-key chunk)
// whose rows hold the positions the decoder's ring holds: the second call's ring happens to be
// sorted (its newest position, 373, is 186 modulo 187), the others are rotated. Also a causal
// call without a window over a plain cache at the same positions, in one call and in calls.
void CheckTileRowsDoNotDependOnTheCall(const KernelTable* kt) {
  constexpr int64_t kPositions = 400, kFirstQuery = 300, kWindow = 150, kCall = 37;
  constexpr int64_t kRing = kWindow + kCall, kHeads = 4, kKvHeads = 2, kHd = 64;
  constexpr int64_t kQWidth = kHeads * kHd, kKvWidth = kKvHeads * kHd;
  const std::vector<float> q = RandomNormal(static_cast<size_t>(kPositions * kQWidth), 91);
  const std::vector<float> k = RandomNormal(static_cast<size_t>(kPositions * kKvWidth), 92);
  const std::vector<float> v = RandomNormal(static_cast<size_t>(kPositions * kKvWidth), 93);
  std::vector<int32_t> pos(kPositions);
  std::iota(pos.begin(), pos.end(), 0);
  ThreadPool pool(2);
  // Queries [q0, q1) over the cache rows `rows` (kv_pos: their positions, K/V: those positions'
  // values), into out's rows for positions q0.. (out holds rows from kFirstQuery on).
  auto run = [&](int64_t q0, int64_t q1, const std::vector<int32_t>& kv_pos, int32_t window,
                 std::vector<float>* out) {
    std::vector<float> kc, vc;
    for (int32_t p : kv_pos) {
      kc.insert(kc.end(), k.begin() + p * kKvWidth, k.begin() + (p + 1) * kKvWidth);
      vc.insert(vc.end(), v.begin() + p * kKvWidth, v.begin() + (p + 1) * kKvWidth);
    }
    AttentionArgs a;
    a.q = q.data() + q0 * kQWidth;
    a.k = kc.data();
    a.v = vc.data();
    a.kv_type = DType::kF32;
    a.out = out->data() + (q0 - kFirstQuery) * kQWidth;
    a.n_q = q1 - q0;
    a.n_kv = static_cast<int64_t>(kv_pos.size());
    a.n_heads = kHeads;
    a.n_kv_heads = kKvHeads;
    a.head_dim = kHd;
    a.scale = 0.125f;
    a.causal = true;
    a.q_pos = pos.data() + q0;
    a.kv_pos = kv_pos.data();
    a.window = window;
    a.q_win_pos = window > 0 ? pos.data() + q0 : nullptr;
    a.bf16_tiles = true;
    ASSERT_TRUE(engine::ops::Attention(*kt, &pool, a).ok());
  };
  const size_t out_size = static_cast<size_t>((kPositions - kFirstQuery) * kQWidth);
  for (const int32_t window : {int32_t{kWindow}, int32_t{0}}) {
    SCOPED_TRACE("window " + std::to_string(window));
    std::vector<float> whole(out_size, -1.0f), calls(out_size, -2.0f), ring(out_size, -3.0f);
    run(kFirstQuery, kPositions, pos, window, &whole);
    bool sorted_ring_seen = false;
    for (int64_t q0 = kFirstQuery; q0 < kPositions; q0 += kCall) {
      const int64_t q1 = std::min(kPositions, q0 + kCall);
      run(q0, q1, std::vector<int32_t>(pos.begin(), pos.begin() + q1), window, &calls);
      if (window == 0) continue;
      const auto last = static_cast<int32_t>(q1 - 1);
      std::vector<int32_t> ring_pos(kRing);  // as TextDecoder::Attend labels a wrapped ring
      for (int32_t j = 0; j < kRing; ++j) ring_pos[j] = last - (last - j) % kRing;
      sorted_ring_seen |= std::is_sorted(ring_pos.begin(), ring_pos.end());
      run(q0, q1, ring_pos, window, &ring);
    }
    for (size_t i = 0; i < out_size; ++i) {
      ASSERT_EQ(calls[i], whole[i]) << "calls of 37, value " << i;
      if (window > 0) {
        ASSERT_EQ(ring[i], whole[i]) << "ring, value " << i;
      }
    }
    if (window > 0) {
      EXPECT_TRUE(sorted_ring_seen);
    }
  }
}

// Every x86 SIMD table (FMAs, vdpbf16ps, AMX).
TEST(Attention, TileRowsDoNotDependOnTheCall) {
  const auto has = [](const KernelTable& t) { return t.tile_attention != nullptr; };
  if (!ForEachTableWith(has, CheckTileRowsDoNotDependOnTheCall)) {
    GTEST_SKIP() << "no bf16 attention kernel on this CPU";
  }
}

// Every x86 SIMD table (FMAs, vdpbf16ps, AMX).
TEST(Attention, Bf16OperandsOnTilesInSpans) {
  const auto has = [](const KernelTable& t) { return t.tile_attention != nullptr; };
  if (!ForEachTableWith(has, CheckBf16OperandsOnTilesInSpans)) {
    GTEST_SKIP() << "no bf16 attention kernel on this CPU";
  }
}

}  // namespace
}  // namespace vlmd::testing
