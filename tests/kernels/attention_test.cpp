// Attention op (and its dot/axpy row kernels) against a naive double-precision attention:
// causal and unmasked, GQA/MQA, one query row and many, F16 and F32 caches, strided layouts,
// unsorted positions, and threading. Tolerances follow the error model of NaiveAttention
// (attention_test_util.h); the bf16 flash path and row spans are in attention_tile_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
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
// Runs the op for every ISA and both cache types; out_row_stride wider than needed, with the
// gap checked untouched.
void CheckCase(const Case& c, ThreadPool* pool = nullptr) {
  for (DType kv : {DType::kF16, DType::kF32}) {
    Problem p = Make(c, kv, 1000 + static_cast<uint32_t>(c.n_q * 7 + c.n_kv));
    std::vector<double> want, tol;
    NaiveAttention(p, &want, &tol);
    const int64_t width = c.n_heads * c.head_dim, out_stride = width + 3;
    for (Isa isa : AvailableIsas()) {
      const std::string vars = c.Vars(isa, kv);
      std::vector<float> out(static_cast<size_t>(c.n_q * out_stride), -7.0f);
      AttentionArgs a = p.args;
      a.out = out.data();
      a.out_row_stride = out_stride;
      Status st = engine::ops::Attention(GetKernelTable(isa), pool, a);
      ASSERT_TRUE(st.ok()) << vars << ": " << st.ToString();
      int failures = 0;
      for (int64_t i = 0; i < c.n_q; ++i) {
        for (int64_t e = 0; e < out_stride; ++e) {
          const float got = out[i * out_stride + e];
          if (e >= width) {
            ASSERT_EQ(got, -7.0f) << vars << " wrote past the row, i=" << i << " e=" << e;
            continue;
          }
          const size_t at = static_cast<size_t>(i * width + e);
          if (!(std::fabs(got - want[at]) <= tol[at]) && failures++ < 5) {
            ADD_FAILURE() << vars << " i=" << i << " head=" << e / c.head_dim
                          << " d=" << e % c.head_dim << " got=" << got << " want=" << want[at]
                          << " tol=" << tol[at];
          }
        }
      }
    }
  }
}

// Sliding windows (Gemma 3's local layers): a decode row over a long cache, a prompt chunk with
// history whose rows' windows move, an unsorted cache, and rows of a bidirectional span (q_pos
// raised to the span's end, the window from each row's own position).
TEST(Attention, SlidingWindow) {
  auto windowed = [](Case c, int32_t window, bool one_span = false) {
    c.window = window;
    c.one_span = one_span;
    return c;
  };
  CheckCase(windowed({"window decode", 1, 300, 8, 2, 64, true, 299}, 40));
  CheckCase(windowed({"window prefill", 70, 130, 4, 2, 32, true, 60}, 16));
  Case unsorted{"window unsorted", 9, 50, 4, 1, 32, true, 41};
  unsorted.shuffle_kv = true;
  CheckCase(windowed(unsorted, 12));
  CheckCase(windowed({"window span", 20, 60, 4, 2, 32, true, 40}, 12, /*one_span=*/true));
  // A window longer than the cache masks nothing (dropped: the blocked path); one that masks
  // only the first queries' earliest rows must still be applied.
  CheckCase(windowed({"window covers all", 40, 40, 4, 2, 32, true, 0}, 64));
  CheckCase(windowed({"window covers most", 40, 40, 4, 2, 32, true, 0}, 39));
}

TEST(Attention, DecodeOneQueryRowCausalGqa) {
  CheckCase({"decode", 1, 300, 8, 2, 64, true, 299});
}

TEST(Attention, PrefillCausalWithHistory) {
  CheckCase({"prefill", 37, 57, 6, 3, 72, true, 20});
}

TEST(Attention, VisionNoMaskOddHeadDim) {
  CheckCase({"vision", 50, 50, 4, 4, 33, false});
}

TEST(Attention, MultiQueryOneKvHead) {
  CheckCase({"mqa", 5, 140, 4, 1, 16, true, 135});
}

TEST(Attention, HeadMajorCacheAndFusedQkv) {
  Case c{"strided", 9, 200, 4, 2, 40, true, 191};
  c.head_major = true;
  c.fused_q = true;
  CheckCase(c);
}

// The blocked (many-query) path reads its K / V^T copies through the same strides: a head-major
// cache with fused Q rows, 40 queries (blocked from 16), alone and over a pool.
TEST(Attention, BlockedPathHeadMajorCacheAndFusedQkv) {
  Case c{"blocked-strided", 40, 230, 6, 3, 48, true, 200};
  c.head_major = true;
  c.fused_q = true;
  CheckCase(c);
  ThreadPool pool(2);
  CheckCase(c, &pool);
}

TEST(Attention, UnsortedKvPositions) {
  Case c{"unsorted", 21, 260, 4, 2, 32, true, 239};
  c.shuffle_kv = true;
  CheckCase(c);
}

// A reversed cache puts future positions first: whole 128-row blocks are masked for every query
// head of a group (their weights must be zero, their V rows unread), in the grouped streaming
// path. With 600 rows (three ranges of whole 128-row blocks) and queries at positions 50-52, the
// last range starts with a fully masked block and ends with a partly visible one, so whatever
// the masked block left in the accumulators would show (checked by breaking the code).
TEST(Attention, FullyMaskedBlocksOfAnUnsortedCache) {
  Case c{"masked-blocks", 3, 600, 4, 2, 32, true, 50};
  c.shuffle_kv = true;
  CheckCase(c);
}

TEST(Attention, RisingMaxAcrossBlocksStaysStable) {
  // Peaky softmax whose max keeps growing across the 128-row blocks: the online rescaling path.
  Case c{"rising", 3, 700, 2, 1, 64, false};
  c.scale_mult = 6.0f;
  c.growing_keys = true;
  CheckCase(c);
}

// The op with `pool` gives the numbers it gives on one thread, bit for bit, for every ISA and
// both cache types.
void ExpectThreadedEqualsSingle(const Case& c, uint32_t seed, ThreadPool* pool) {
  for (DType kv : {DType::kF16, DType::kF32}) {
    Problem p = Make(c, kv, seed);
    for (Isa isa : AvailableIsas()) {
      const int64_t n_out = p.args.n_q * p.args.n_heads * p.args.head_dim;
      std::vector<float> single(n_out), threaded(n_out);
      AttentionArgs a = p.args;
      a.out = single.data();
      ASSERT_TRUE(engine::ops::Attention(GetKernelTable(isa), nullptr, a).ok());
      a.out = threaded.data();
      ASSERT_TRUE(engine::ops::Attention(GetKernelTable(isa), pool, a).ok());
      EXPECT_EQ(single, threaded) << c.Vars(isa, kv);
    }
  }
}

TEST(Attention, ThreadedMatchesSingleThreadBitwise) {
  ThreadPool pool(3);
  ExpectThreadedEqualsSingle({"threads", 33, 180, 8, 4, 64, true, 147}, 77, &pool);
  CheckCase({"threaded", 40, 90, 4, 2, 48, true, 50}, &pool);
}

// Multi-query decode over a short cache (one kv head, one range): the heads are spread over the
// pool one per task; the result is the same as alone.
TEST(Attention, MultiQueryDecodeOverAPool) {
  Case c{"mqa-decode", 1, 200, 16, 1, 64, true, 199};
  ThreadPool pool(2);
  CheckCase(c, &pool);
  ExpectThreadedEqualsSingle(c, 93, &pool);
}

// A decode step over a long GQA cache runs as (kv head, range of rows) tasks merged afterwards:
// the same numbers with and without threads, and the reference's within tolerance.
TEST(Attention, LongCacheDecodeRangesMatchAcrossThreads) {
  ThreadPool pool(2);
  ExpectThreadedEqualsSingle({"ranges", 2, 1100, 9, 3, 64, true, 1098}, 91, &pool);
  CheckCase({"ranges", 2, 1100, 9, 3, 64, true, 1098}, &pool);
  Case rising{"ranges-rising", 1, 900, 2, 1, 64, false};  // later ranges hold the larger max
  rising.scale_mult = 6.0f;
  rising.growing_keys = true;
  CheckCase(rising, &pool);
}

// A NaN in a query row makes that head's output NaN (never finite garbage), on the streaming
// path with one range and with several (merged), and leaves the other heads as they were.
TEST(Attention, NanQueryGivesNanForItsHeadOnly) {
  for (int64_t n_kv : {100, 700}) {
    Problem p = Make({"nan", 1, n_kv, 4, 2, 16, true, static_cast<int32_t>(n_kv - 1)},
                     DType::kF32, 9);
    std::vector<float> clean(4 * 16), out(4 * 16);
    p.args.out = clean.data();
    ASSERT_TRUE(engine::ops::Attention(GetKernelTable(Isa::kRef), nullptr, p.args).ok());
    p.q_buf[1 * 16 + 3] = NAN;  // head 1
    p.args.q = p.q_buf.data();
    for (Isa isa : AvailableIsas()) {
      p.args.out = out.data();
      ASSERT_TRUE(engine::ops::Attention(GetKernelTable(isa), nullptr, p.args).ok());
      for (int64_t h = 0; h < 4; ++h) {
        for (int64_t e = 0; e < 16; ++e) {
          if (h == 1) {
            EXPECT_TRUE(std::isnan(out[h * 16 + e])) << IsaName(isa) << " n_kv=" << n_kv;
          } else {
            EXPECT_NEAR(out[h * 16 + e], clean[h * 16 + e], 1e-5) << IsaName(isa) << " h=" << h;
          }
        }
      }
    }
  }
}

TEST(Attention, NothingVisibleGivesZeros) {
  Problem p = Make({"empty", 2, 10, 2, 1, 8, true, 0}, DType::kF32, 5);
  p.q_pos = {-1, 0};  // row 0 sees nothing, row 1 sees kv 0 only
  p.args.q_pos = p.q_pos.data();
  std::vector<float> out(2 * 2 * 8, 3.0f);
  p.args.out = out.data();
  ASSERT_TRUE(engine::ops::Attention(GetKernelTable(Isa::kRef), nullptr, p.args).ok());
  for (int e = 0; e < 16; ++e) EXPECT_EQ(out[e], 0.0f) << e;
  for (int e = 0; e < 8; ++e) EXPECT_EQ(out[16 + e], p.v_vals[e]) << e;  // p = 1 on kv 0 head 0

  p.args.n_kv = 0;
  std::fill(out.begin(), out.end(), 3.0f);
  ASSERT_TRUE(engine::ops::Attention(GetKernelTable(Isa::kRef), nullptr, p.args).ok());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// Many query rows take the blocked (GEMM) path; here the first rows see no cache row at all and
// the others see prefixes of different lengths, block edges included (70 rows = 64 + 6).
TEST(Attention, BlockedPathMasksPerRowLikeTheStreamingPath) {
  for (DType kv : {DType::kF16, DType::kF32}) {
    Problem p = Make({"blocked", 70, 90, 4, 2, 24, true, -5}, kv, 9);
    const int64_t width = 4 * 24;
    std::vector<float> blocked(70 * width, 3.0f);
    for (Isa isa : AvailableIsas()) {
      AttentionArgs a = p.args;
      a.out = blocked.data();
      ASSERT_TRUE(engine::ops::Attention(GetKernelTable(isa), nullptr, a).ok());
      for (int64_t i = 0; i < 70; ++i) {
        // The same row alone takes the streaming path.
        std::vector<float> one(width, 5.0f);
        AttentionArgs b = p.args;
        b.n_q = 1;
        b.q = p.args.q + i * width;
        b.q_pos = p.args.q_pos + i;
        b.out = one.data();
        ASSERT_TRUE(engine::ops::Attention(GetKernelTable(isa), nullptr, b).ok());
        for (int64_t e = 0; e < width; ++e) {
          const float got = blocked[i * width + e];
          if (p.q_pos[i] < 0) {
            ASSERT_EQ(got, 0.0f) << "row " << i << " sees nothing";
          } else {
            ASSERT_NEAR(got, one[e], 1e-5f * (1.0f + std::fabs(one[e])))
                << IsaName(isa) << " row " << i << " e " << e;
          }
        }
      }
    }
  }
}

TEST(Attention, RejectsInconsistentArguments) {
  Problem p = Make({"bad", 2, 10, 4, 2, 8, true, 9}, DType::kF16, 6);
  std::vector<float> out(2 * 4 * 8);
  p.args.out = out.data();
  const KernelTable& kt = GetKernelTable(Isa::kRef);
  auto expect_invalid = [&](AttentionArgs a, const char* what) {
    Status st = engine::ops::Attention(kt, nullptr, a);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what << ": " << st.ToString();
  };
  AttentionArgs a = p.args;
  a.n_kv_heads = 3;
  expect_invalid(a, "n_heads % n_kv_heads");
  a = p.args;
  a.kv_type = DType::kQ8_0;
  expect_invalid(a, "kv_type");
  a = p.args;
  a.kv_pos = nullptr;
  expect_invalid(a, "causal without kv_pos");
  a = p.args;
  a.q = nullptr;
  expect_invalid(a, "null q");
  a = p.args;
  a.head_dim = 0;
  expect_invalid(a, "head_dim 0");
  a = p.args;
  a.q_row_stride = 5;
  expect_invalid(a, "q stride too small");
  a = p.args;
  a.scale = NAN;
  expect_invalid(a, "scale nan");
  const RowSpan spans[] = {{0, 2}};
  a = p.args;
  a.spans = spans;
  expect_invalid(a, "spans with a causal mask and n_q != n_kv");
  Problem self = Make({"self", 6, 6, 4, 2, 8, false}, DType::kF32, 7);
  std::vector<float> self_out(6 * 4 * 8);
  self.args.out = self_out.data();
  const RowSpan outside[] = {{4, 3}};
  a = self.args;
  a.spans = outside;
  expect_invalid(a, "span past the rows");
  a = self.args;
  a.kv_type = DType::kBF16;
  expect_invalid(a, "bf16 operands without bf16_tiles");
  a.bf16_tiles = true;
  expect_invalid(a, "bf16 operands without q_bf16 / out_bf16");
  std::vector<uint16_t> q16(6 * 32 * 2), o16(6 * 32 * 2);
  a.q_bf16 = q16.data();
  a.out_bf16 = o16.data();
  EXPECT_EQ(engine::ops::Attention(kt, nullptr, a).code(), StatusCode::kUnimplemented)
      << "bf16 operands on a table without the tile kernels";
  a = self.args;
  a.spans = {};
  EXPECT_TRUE(engine::ops::Attention(kt, nullptr, a).ok());
  EXPECT_TRUE(engine::ops::Attention(kt, nullptr, p.args).ok());
}

// The row kernels on their own, every ISA against ref, lengths across the SIMD tails, groups of
// 1 to 6 query heads (the kernels take up to 4 at a time) and row counts that are not a
// multiple of the dot kernel's 4-row reduction.
TEST(AttentionKernels, DotAndAxpyRowsMatchRef) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n : {1, 7, 33, 64, 80, 1000}) {
      for (int64_t g : {1, 3, 6}) {
        const int64_t n_rows = 37, stride = n + 3;  // padded rows
        const int64_t out_stride = n_rows + 5, w_stride = n_rows + 2;
        const auto q = RandomNormal(g * n, 300 + n);
        const auto w = RandomUniform(g * w_stride, 301 + n, 0.0f, 1.0f);
        auto rows32 = RandomNormal(n_rows * stride, 302 + n);
        std::vector<uint16_t> rows16(rows32.size());
        for (size_t e = 0; e < rows32.size(); ++e) {
          rows16[e] = FloatToHalf(rows32[e]);
          rows32[e] = HalfToFloat(rows16[e]);  // identical values in both caches
        }
        for (bool f16 : {false, true}) {
          const void* rows = f16 ? static_cast<const void*>(rows16.data()) : rows32.data();
          const size_t bytes = static_cast<size_t>(stride) * (f16 ? 2 : 4);
          const auto dot = f16 ? t.dot_rows_f16 : t.dot_rows_f32;
          const auto dot_ref = f16 ? ref.dot_rows_f16 : ref.dot_rows_f32;
          const auto axpy = f16 ? t.axpy_rows_f16 : t.axpy_rows_f32;
          const auto axpy_ref = f16 ? ref.axpy_rows_f16 : ref.axpy_rows_f32;
          const std::string vars = std::string(IsaName(isa)) + (f16 ? " f16" : " f32") +
                                   " n=" + std::to_string(n) + " g=" + std::to_string(g);
          std::vector<float> got(static_cast<size_t>(g * out_stride), 7.0f), want = got;
          dot(q.data(), g, rows, bytes, n_rows, n, got.data(), out_stride);
          dot_ref(q.data(), g, rows, bytes, n_rows, n, want.data(), out_stride);
          for (int64_t h = 0; h < g; ++h) {
            for (int64_t j = 0; j < out_stride; ++j) {
              const size_t at = static_cast<size_t>(h * out_stride + j);
              if (j >= n_rows) {
                ASSERT_EQ(got[at], 7.0f) << "dot_rows wrote past n_rows " << vars;
                continue;
              }
              double mag = 0;
              for (int64_t d = 0; d < n; ++d) {
                mag += std::fabs(double(q[h * n + d]) * rows32[j * stride + d]);
              }
              // One accumulator per (row, head): ceil(n / lanes) roundings in a chain, then
              // the lane tree (log2 lanes), plus the ref's one and a spare.
              const double steps = std::ceil(static_cast<double>(n) / Lanes(isa)) + 2.0 +
                                   std::log2(static_cast<double>(Lanes(isa)));
              ASSERT_NEAR(got[at], want[at], (steps + 1) * kU * mag + kTiny)
                  << "dot_rows " << vars << " h=" << h << " j=" << j;
            }
          }
          auto acc = RandomNormal(g * n, 303 + n);
          std::vector<float> acc_got = acc, acc_want = acc;
          axpy(w.data(), w_stride, g, rows, bytes, n_rows, n, acc_got.data());
          axpy_ref(w.data(), w_stride, g, rows, bytes, n_rows, n, acc_want.data());
          for (int64_t h = 0; h < g; ++h) {
            for (int64_t d = 0; d < n; ++d) {
              double mag = std::fabs(acc[h * n + d]);
              for (int64_t j = 0; j < n_rows; ++j) {
                mag += std::fabs(w[h * w_stride + j] * rows32[j * stride + d]);
              }
              // Sequential over rows: n_rows fma roundings, plus the ref's one.
              ASSERT_NEAR(acc_got[h * n + d], acc_want[h * n + d], (n_rows + 2) * kU * mag + kTiny)
                  << "axpy_rows " << vars << " h=" << h << " d=" << d;
            }
          }
        }
      }
    }
  }
}

TEST(HalfConversion, TestHelpersRoundTripEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << h;
  }
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds up to inf
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);  // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
}

}  // namespace
}  // namespace vlmd::testing
