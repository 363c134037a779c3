// Shared by the attention tests (attention_test.cpp: the op's f32 paths; attention_tile_test.cpp:
// the bf16 flash path and row spans): the cases, the problem as the op sees it, and attention in
// double with its error model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "engine/kernels/kernel_table.h"
#include "engine/ops/attention.h"
#include "engine/tensor/fp16.h"
#include "kernels/op_test_util.h"

namespace vlmd::testing {

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

inline Problem Make(const Case& c, DType kv_type, uint32_t seed) {
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
inline void NaiveAttention(const Problem& p, std::vector<double>* out, std::vector<double>* tol) {
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

}  // namespace vlmd::testing
