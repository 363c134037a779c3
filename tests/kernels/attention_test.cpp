// Attention op (and its dot/axpy row kernels) against a naive double-precision attention:
// causal and unmasked, GQA/MQA, one query row and many, F16 and F32 caches, strided layouts,
// unsorted positions, and threading. Tolerances follow the error model in AttentionTol.
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
#include "kernels/op_test_util.h"

namespace vlmd::testing {
namespace {

using engine::DType;
using engine::kernels::GetKernelTable;
using engine::kernels::Isa;
using engine::kernels::IsaName;
using engine::kernels::KernelTable;
using engine::ops::AttentionArgs;
using engine::ops::RowSpan;

struct Case {
  const char* name;
  int64_t n_q, n_kv, n_heads, n_kv_heads, head_dim;
  bool causal;
  int32_t first_q_pos = 0;       // q_pos[i] = first_q_pos + i; kv_pos[j] = j (before shuffling)
  bool head_major = false;       // cache [n_kv_heads, n_ctx, head_dim] with n_ctx > n_kv
  bool fused_q = false;          // q rows inside a wider [n_q, (n_heads + 2 n_kv_heads) hd] buffer
  bool shuffle_kv = false;       // cache rows reversed (positions follow them): unsorted
  float scale_mult = 1.0f;       // multiplies 1/sqrt(head_dim): larger -> peakier softmax
  bool growing_keys = false;     // later keys larger: the running max rises block after block
  int32_t window = 0;            // sliding window (kv_pos > q_win_pos - window)
  bool one_span = false;         // every query's q_pos raised to the last one's (bidirectional)
  // A sliding-window ring that wrapped: positions ring_first_pos .. + n_kv - 1, row j holding
  // the one that is j modulo n_kv (0: kv_pos[j] = j).
  int32_t ring_first_pos = 0;

  std::string Vars(Isa isa, DType kv) const {
    return std::string(name) + " isa=" + std::string(IsaName(isa)) +
           " kv=" + (kv == DType::kF16 ? "f16" : "f32") + " n_q=" + std::to_string(n_q) +
           " n_kv=" + std::to_string(n_kv) + " heads=" + std::to_string(n_heads) + "/" +
           std::to_string(n_kv_heads) + " hd=" + std::to_string(head_dim);
  }
};

// Test data plus the cache exactly as the op sees it (F16 values are rounded first, and the
// naive reference reads the rounded values, so conversion is not an error source).
struct Problem {
  std::vector<float> q_buf;                 // q rows at q_row_stride
  std::vector<float> k_vals, v_vals;        // [n_kv, n_kv_heads, head_dim] as the op sees them
  std::vector<float> k32, v32;              // cache storage (F32)
  std::vector<uint16_t> k16, v16;           // cache storage (F16)
  std::vector<int32_t> q_pos, kv_pos, q_win_pos;
  AttentionArgs args;
};

Problem Make(const Case& c, DType kv_type, uint32_t seed) {
  Problem p;
  const int64_t q_width = c.n_heads * c.head_dim;
  const int64_t q_stride = c.fused_q ? (c.n_heads + 2 * c.n_kv_heads) * c.head_dim : q_width;
  p.q_buf = RandomNormal(c.n_q * q_stride, seed);
  p.k_vals = RandomNormal(c.n_kv * c.n_kv_heads * c.head_dim, seed + 1);
  p.v_vals = RandomNormal(c.n_kv * c.n_kv_heads * c.head_dim, seed + 2, 1.0f, 0.5f);
  if (c.growing_keys) {
    for (int64_t j = 0; j < c.n_kv; ++j) {
      for (int64_t e = 0; e < c.n_kv_heads * c.head_dim; ++e) {
        p.k_vals[j * c.n_kv_heads * c.head_dim + e] *= 0.2f + 2.0f * j / c.n_kv;
      }
    }
  }
  if (kv_type == DType::kF16) {
    for (float& x : p.k_vals) x = HalfToFloat(FloatToHalf(x));
    for (float& x : p.v_vals) x = HalfToFloat(FloatToHalf(x));
  }
  p.q_pos.resize(c.n_q);
  for (int64_t i = 0; i < c.n_q; ++i) p.q_pos[i] = c.first_q_pos + static_cast<int32_t>(i);
  p.q_win_pos = p.q_pos;  // the rows' own positions
  if (c.one_span) std::fill(p.q_pos.begin(), p.q_pos.end(), p.q_pos.back());
  p.kv_pos.resize(c.n_kv);
  std::iota(p.kv_pos.begin(), p.kv_pos.end(), 0);
  if (c.ring_first_pos > 0) {
    const auto n = static_cast<int32_t>(c.n_kv);
    for (int32_t j = 0; j < n; ++j) {
      p.kv_pos[j] = c.ring_first_pos + ((j - c.ring_first_pos) % n + n) % n;
    }
  }
  if (c.shuffle_kv) {
    // Reverse the rows (and their positions): an unsorted cache must give the same answer.
    std::reverse(p.kv_pos.begin(), p.kv_pos.end());
    const int64_t row = c.n_kv_heads * c.head_dim;
    for (int64_t j = 0; j < c.n_kv / 2; ++j) {
      std::swap_ranges(p.k_vals.begin() + j * row, p.k_vals.begin() + (j + 1) * row,
                       p.k_vals.begin() + (c.n_kv - 1 - j) * row);
      std::swap_ranges(p.v_vals.begin() + j * row, p.v_vals.begin() + (j + 1) * row,
                       p.v_vals.begin() + (c.n_kv - 1 - j) * row);
    }
  }

  // Storage layout.
  const int64_t n_ctx = c.head_major ? c.n_kv + 9 : c.n_kv;
  const int64_t row_stride = c.head_major ? c.head_dim : c.n_kv_heads * c.head_dim;
  const int64_t head_stride = c.head_major ? n_ctx * c.head_dim : c.head_dim;
  const size_t cache_elems = static_cast<size_t>(n_ctx * c.n_kv_heads * c.head_dim);
  p.k32.assign(cache_elems, NAN);  // padding is NaN: reading it would poison the output
  p.v32.assign(cache_elems, NAN);
  for (int64_t j = 0; j < c.n_kv; ++j) {
    for (int64_t g = 0; g < c.n_kv_heads; ++g) {
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const size_t at = static_cast<size_t>(j * row_stride + g * head_stride + d);
        const size_t src = static_cast<size_t>((j * c.n_kv_heads + g) * c.head_dim + d);
        p.k32[at] = p.k_vals[src];
        p.v32[at] = p.v_vals[src];
      }
    }
  }
  p.k16.resize(cache_elems);
  p.v16.resize(cache_elems);
  for (size_t e = 0; e < cache_elems; ++e) {
    p.k16[e] = FloatToHalf(p.k32[e]);
    p.v16[e] = FloatToHalf(p.v32[e]);
  }

  AttentionArgs& a = p.args;
  a.q = p.q_buf.data();
  a.q_row_stride = c.fused_q ? q_stride : 0;
  a.kv_type = kv_type;
  a.k = kv_type == DType::kF16 ? static_cast<const void*>(p.k16.data()) : p.k32.data();
  a.v = kv_type == DType::kF16 ? static_cast<const void*>(p.v16.data()) : p.v32.data();
  a.kv_row_stride = c.head_major ? row_stride : 0;
  a.kv_head_stride = c.head_major ? head_stride : 0;
  a.n_q = c.n_q;
  a.n_kv = c.n_kv;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = c.scale_mult / std::sqrt(static_cast<float>(c.head_dim));
  a.causal = c.causal;
  a.q_pos = c.causal ? p.q_pos.data() : nullptr;
  a.kv_pos = c.causal ? p.kv_pos.data() : nullptr;
  a.window = c.window;
  a.q_win_pos = c.window > 0 ? p.q_win_pos.data() : nullptr;
  return p;
}

// Naive attention in double on the values the op sees; also the tolerance per output value.
//
// Error model (first order, u = 2^-24), for one query row and head over n_vis visible rows:
//  * a score s_j = fl(scale q) . k_j errs by ds_j <= (hd + 4) u sum_d |scale q_d k_jd|;
//  * a weight e_j = exp(s_j - m) then errs relatively by 2 max ds + (|s_j - m| + 2) u (the
//    shift m itself cancels between numerator and denominator);
//  * weight errors d_j move the output by sum_j p_j d_j |v_j - o| <= d_max * 2 max_j |v_jd|;
//  * accumulating acc and l over n_vis rows in blocks (with one rescale per block) adds
//    (n_vis + 2 n_blocks + 4) u relative to sum_j p_j |v_jd| and to |o_d|.
void NaiveAttention(const Problem& p, std::vector<double>* out, std::vector<double>* tol) {
  const AttentionArgs& a = p.args;
  const int64_t hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int64_t q_stride = a.q_row_stride ? a.q_row_stride : a.n_heads * hd;
  out->assign(static_cast<size_t>(a.n_q * a.n_heads * hd), 0.0);
  tol->assign(out->size(), kTiny);
  const float scale = a.scale;
  for (int64_t i = 0; i < a.n_q; ++i) {
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const float* q = p.q_buf.data() + i * q_stride + h * hd;
      const int64_t g = h / group;
      std::vector<double> s, ds;
      std::vector<int64_t> rows;
      for (int64_t j = 0; j < a.n_kv; ++j) {
        if (a.causal && p.kv_pos[j] > p.q_pos[i]) continue;
        if (a.window > 0 && p.q_win_pos[i] - p.kv_pos[j] >= a.window) continue;
        const float* k = p.k_vals.data() + (j * a.n_kv_heads + g) * hd;
        double dot = 0, mag = 0;
        for (int64_t d = 0; d < hd; ++d) {
          dot += static_cast<double>(scale) * q[d] * k[d];
          mag += std::fabs(static_cast<double>(scale) * q[d] * k[d]);
        }
        s.push_back(dot);
        ds.push_back((hd + 4) * kU * mag);
        rows.push_back(j);
      }
      if (rows.empty()) continue;  // no visible row: zeros, exactly
      const double m = *std::max_element(s.begin(), s.end());
      double z = 0, ds_max = 0, range = 0;
      for (size_t r = 0; r < s.size(); ++r) {
        z += std::exp(s[r] - m);
        ds_max = std::max(ds_max, ds[r]);
        range = std::max(range, m - s[r]);
      }
      const double n_vis = static_cast<double>(rows.size());
      const double acc_rel = (n_vis + 2 * std::ceil(n_vis / 128) + 4) * kU;
      const double weight_rel = 2 * ds_max + (range + 2) * kU;
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0, abs_pv = 0, v_max = 0;
        for (size_t r = 0; r < rows.size(); ++r) {
          const double pr = std::exp(s[r] - m) / z;
          const double v = p.v_vals[(rows[r] * a.n_kv_heads + g) * hd + d];
          o += pr * v;
          abs_pv += pr * std::fabs(v);
          v_max = std::max(v_max, std::fabs(v));
        }
        const size_t at = static_cast<size_t>((i * a.n_heads + h) * hd + d);
        (*out)[at] = o;
        (*tol)[at] = weight_rel * 2 * v_max + acc_rel * (abs_pv + std::fabs(o)) + kTiny;
      }
    }
  }
}

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

// The fast precision's tile path (bf16_tiles, on AMX) against attention in double over the op's
// own f32 / f16 values: within the bf16 roundings it adds. With u = 2^-9 (bf16), q and k
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

TEST(Attention, TilePathStaysWithinBf16Rounding) {  // every AVX-512 table (FMAs, vdpbf16ps, AMX)
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
  SpanProblem p{n, heads, hd};
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
      if (window > 0) ASSERT_EQ(ring[i], whole[i]) << "ring, value " << i;
    }
    if (window > 0) EXPECT_TRUE(sorted_ring_seen);
  }
}

TEST(Attention, TileRowsDoNotDependOnTheCall) {  // every AVX-512 table (FMAs, vdpbf16ps, AMX)
  const auto has = [](const KernelTable& t) { return t.tile_attention != nullptr; };
  if (!ForEachTableWith(has, CheckTileRowsDoNotDependOnTheCall)) {
    GTEST_SKIP() << "no bf16 attention kernel on this CPU";
  }
}

TEST(Attention, Bf16OperandsOnTilesInSpans) {  // every AVX-512 table (FMAs, vdpbf16ps, AMX)
  const auto has = [](const KernelTable& t) { return t.tile_attention != nullptr; };
  if (!ForEachTableWith(has, CheckBf16OperandsOnTilesInSpans)) {
    GTEST_SKIP() << "no bf16 attention kernel on this CPU";
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
