// Attention op. Each (query row, head) task streams over the cache in blocks of kBlock rows:
//   s = K_blk q' (q' = scale * q), m' = max(m, max s), acc = acc * e^(m - m') + sum e^(s - m') V,
//   l = l * e^(m - m') + sum e^(s - m'),  and finally out = acc / l  (online softmax).
// The score block lives on the stack, so scratch is only q' and acc per thread.
//
// Many query rows at once (prefill, with sorted kv positions): per (kv head, block of query
// rows) job the scores are one GEMM S = Q K^T, masked and softmaxed row by row, and the output
// one GEMM P V, on f32 copies of that head's K and V^T. The per-query path above is bound by a
// horizontal sum per cache row; the GEMMs run at the matmul kernels' rate.
#include "engine/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/ops/matmul.h"
#include "engine/ops/parallel.h"
#include "engine/tensor/fp16.h"

namespace vlmd::engine::ops {
namespace {

// Cache rows per block: 1 KiB of scores, and K/V blocks of 128 rows x head_dim stay in L2.
constexpr int64_t kBlock = 128;
// Below this many multiply-adds the op stays on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 16;
// The blocked (GEMM) path: from this many query rows, in blocks of kQueryBlock rows per job.
constexpr int64_t kBlockedMinQueries = 16;
constexpr int64_t kQueryBlock = 64;

struct Plan {
  const AttentionArgs* a;
  kernels::DotRowsFn dot;
  kernels::AxpyRowsFn axpy;
  kernels::ExpSubSumFn exp_sub_sum;
  size_t elem_bytes;
  size_t kv_row_bytes;
  int64_t group;  // query heads per kv head
  bool sorted_kv_pos;
};

Status Validate(const AttentionArgs& a) {
  auto bad = [](const std::string& m) { return InvalidArgumentError("Attention: " + m); };
  if (a.n_q < 0 || a.n_kv < 0 || a.n_heads < 1 || a.n_kv_heads < 1 || a.head_dim < 1) {
    return bad("bad sizes n_q=" + std::to_string(a.n_q) + " n_kv=" + std::to_string(a.n_kv) +
               " n_heads=" + std::to_string(a.n_heads) + " n_kv_heads=" +
               std::to_string(a.n_kv_heads) + " head_dim=" + std::to_string(a.head_dim));
  }
  if (a.n_heads % a.n_kv_heads != 0) {
    return bad("n_heads " + std::to_string(a.n_heads) + " is not a multiple of n_kv_heads " +
               std::to_string(a.n_kv_heads));
  }
  if (a.kv_type != DType::kF16 && a.kv_type != DType::kF32) {
    return bad("kv_type " + std::string(DTypeName(a.kv_type)) + " is not f16 or f32");
  }
  if (!std::isfinite(a.scale)) return bad("scale is not finite");
  if (a.n_q > 0 && (a.q == nullptr || a.out == nullptr)) return bad("null q or out");
  if (a.n_kv > 0 && (a.k == nullptr || a.v == nullptr)) return bad("null k or v");
  if (a.causal && ((a.n_q > 0 && a.q_pos == nullptr) || (a.n_kv > 0 && a.kv_pos == nullptr))) {
    return bad("causal mask needs q_pos and kv_pos");
  }
  const int64_t q_width = a.n_heads * a.head_dim;
  if ((a.q_row_stride != 0 && a.q_row_stride < q_width) ||
      (a.out_row_stride != 0 && a.out_row_stride < q_width)) {
    return bad("q/out row stride smaller than n_heads * head_dim");
  }
  if (a.kv_row_stride < 0 || (a.kv_head_stride != 0 && a.kv_head_stride < a.head_dim)) {
    return bad("bad kv strides");
  }
  return Status::Ok();
}

// One (query row i, head h) task. q_s and acc: head_dim floats of per-thread scratch.
void AttendOne(const Plan& p, int64_t i, int64_t h, float* q_s, float* acc) {
  const AttentionArgs& a = *p.a;
  const int64_t head_dim = a.head_dim;
  const float* q = a.q + i * a.q_row_stride + h * head_dim;
  for (int64_t d = 0; d < head_dim; ++d) q_s[d] = q[d] * a.scale;
  std::fill(acc, acc + head_dim, 0.0f);

  const size_t head_offset = static_cast<size_t>((h / p.group) * a.kv_head_stride) * p.elem_bytes;
  const auto* k_base = static_cast<const uint8_t*>(a.k) + head_offset;
  const auto* v_base = static_cast<const uint8_t*>(a.v) + head_offset;

  int64_t n_visible = a.n_kv;
  const bool mask_each = a.causal && !p.sorted_kv_pos;
  if (a.causal && p.sorted_kv_pos) {
    n_visible = std::upper_bound(a.kv_pos, a.kv_pos + a.n_kv, a.q_pos[i]) - a.kv_pos;
  }

  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float m = kNegInf;  // running max of the scores seen so far
  float l = 0.0f;     // running sum of exp(score - m)
  float s[kBlock];
  for (int64_t j0 = 0; j0 < n_visible; j0 += kBlock) {
    const int64_t nb = std::min(kBlock, n_visible - j0);
    p.dot(q_s, k_base + j0 * p.kv_row_bytes, p.kv_row_bytes, nb, head_dim, s);
    if (mask_each) {
      for (int64_t j = 0; j < nb; ++j) {
        if (a.kv_pos[j0 + j] > a.q_pos[i]) s[j] = kNegInf;
      }
    }
    float block_max = kNegInf;
    for (int64_t j = 0; j < nb; ++j) block_max = s[j] > block_max ? s[j] : block_max;
    if (block_max == kNegInf) continue;  // the whole block is masked
    if (block_max > m) {
      const float c = std::exp(m - block_max);  // m = -inf on the first block: c = 0
      l *= c;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] *= c;
      m = block_max;
    }
    l += p.exp_sub_sum(s, m, s, nb);
    p.axpy(s, v_base + j0 * p.kv_row_bytes, p.kv_row_bytes, nb, head_dim, acc);
  }

  float* out = a.out + i * a.out_row_stride + h * head_dim;
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // no visible row: zeros
  for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d] * inv_l;
}

// Scratch of one worker of the blocked path.
struct BlockedWork {
  std::vector<float> k, vt, scores;  // [n_vis, hd], [hd, n_vis], [kQueryBlock, n_vis]
};

// One job of the blocked path: kv head g, query rows [i0, i1), every query head of g's group.
Status AttendBlock(const kernels::KernelTable& kt, const Plan& p, int64_t g, int64_t i0,
                   int64_t i1, BlockedWork* w) {
  const AttentionArgs& a = *p.a;
  const int64_t hd = a.head_dim, nq = i1 - i0;
  // Cache rows visible to the block's last query (kv positions sorted: a prefix).
  int64_t n_vis = a.n_kv;
  if (a.causal) {
    int32_t max_pos = a.q_pos[i0];
    for (int64_t i = i0; i < i1; ++i) max_pos = std::max(max_pos, a.q_pos[i]);
    n_vis = std::upper_bound(a.kv_pos, a.kv_pos + a.n_kv, max_pos) - a.kv_pos;
  }
  if (n_vis == 0) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
        std::fill_n(a.out + i * a.out_row_stride + h * hd, hd, 0.0f);
      }
    }
    return Status::Ok();
  }
  // f32 copies of this head's K rows and of V transposed (V^T is the weight of the P V product).
  w->k.resize(static_cast<size_t>(n_vis * hd));
  w->vt.resize(static_cast<size_t>(hd * n_vis));
  w->scores.resize(static_cast<size_t>(kQueryBlock * n_vis));
  const size_t head_offset = static_cast<size_t>(g * a.kv_head_stride) * p.elem_bytes;
  const auto* k_base = static_cast<const uint8_t*>(a.k) + head_offset;
  const auto* v_base = static_cast<const uint8_t*>(a.v) + head_offset;
  for (int64_t j = 0; j < n_vis; ++j) {
    const uint8_t* kr = k_base + j * p.kv_row_bytes;
    const uint8_t* vr = v_base + j * p.kv_row_bytes;
    float* kd = w->k.data() + j * hd;
    if (a.kv_type == DType::kF16) {
      const auto* k16 = reinterpret_cast<const uint16_t*>(kr);
      const auto* v16 = reinterpret_cast<const uint16_t*>(vr);
      for (int64_t e = 0; e < hd; ++e) {
        kd[e] = F16ToF32(k16[e]);
        w->vt[e * n_vis + j] = F16ToF32(v16[e]);
      }
    } else {
      const auto* k32 = reinterpret_cast<const float*>(kr);
      const auto* v32 = reinterpret_cast<const float*>(vr);
      for (int64_t e = 0; e < hd; ++e) {
        kd[e] = k32[e];
        w->vt[e * n_vis + j] = v32[e];
      }
    }
  }
  const WeightView k_view{DType::kF32, n_vis, hd, w->k.data(), 0};
  const WeightView v_view{DType::kF32, hd, n_vis, w->vt.data(), 0};
  for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
    VLMD_RETURN_IF_ERROR(MatMul(kt, nullptr, k_view, a.q + i0 * a.q_row_stride + h * hd, nq,
                                a.q_row_stride, w->scores.data(), n_vis, nullptr));
    for (int64_t i = 0; i < nq; ++i) {
      float* row = w->scores.data() + i * n_vis;
      int64_t vis = n_vis;
      if (a.causal) {
        vis = std::upper_bound(a.kv_pos, a.kv_pos + n_vis, a.q_pos[i0 + i]) - a.kv_pos;
      }
      for (int64_t j = 0; j < vis; ++j) row[j] *= a.scale;
      if (vis > 0) kt.softmax(row, vis);
      std::fill(row + vis, row + n_vis, 0.0f);  // masked: probability 0
    }
    VLMD_RETURN_IF_ERROR(MatMul(kt, nullptr, v_view, w->scores.data(), nq, n_vis,
                                a.out + i0 * a.out_row_stride + h * hd, a.out_row_stride, nullptr));
  }
  return Status::Ok();
}

Status AttentionBlocked(const kernels::KernelTable& kt, ThreadPool* pool, const Plan& p) {
  const AttentionArgs& a = *p.a;
  const int64_t q_blocks = (a.n_q + kQueryBlock - 1) / kQueryBlock;
  const int64_t jobs = a.n_kv_heads * q_blocks;
  std::vector<BlockedWork> work(static_cast<size_t>(pool != nullptr ? pool->size() : 1));
  return internal::ForJobs(pool, jobs, [&](int64_t job, int worker) {
    const int64_t g = job % a.n_kv_heads, i0 = (job / a.n_kv_heads) * kQueryBlock;
    return AttendBlock(kt, p, g, i0, std::min(a.n_q, i0 + kQueryBlock),
                       &work[static_cast<size_t>(worker)]);
  });
}

}  // namespace

Status Attention(const kernels::KernelTable& kt, ThreadPool* pool, const AttentionArgs& args) {
  VLMD_RETURN_IF_ERROR(Validate(args));
  AttentionArgs a = args;  // with defaults resolved
  if (a.q_row_stride == 0) a.q_row_stride = a.n_heads * a.head_dim;
  if (a.out_row_stride == 0) a.out_row_stride = a.n_heads * a.head_dim;
  if (a.kv_row_stride == 0) a.kv_row_stride = a.n_kv_heads * a.head_dim;
  if (a.kv_head_stride == 0) a.kv_head_stride = a.head_dim;
  if (a.n_q == 0) return Status::Ok();

  Plan p;
  p.a = &a;
  const bool f16 = a.kv_type == DType::kF16;
  p.dot = f16 ? kt.dot_rows_f16 : kt.dot_rows_f32;
  p.axpy = f16 ? kt.axpy_rows_f16 : kt.axpy_rows_f32;
  p.exp_sub_sum = kt.exp_sub_sum;
  p.elem_bytes = f16 ? 2 : 4;
  p.kv_row_bytes = static_cast<size_t>(a.kv_row_stride) * p.elem_bytes;
  p.group = a.n_heads / a.n_kv_heads;
  p.sorted_kv_pos = a.causal && std::is_sorted(a.kv_pos, a.kv_pos + a.n_kv);
  if (a.n_q >= kBlockedMinQueries && a.n_kv > 0 && (!a.causal || p.sorted_kv_pos)) {
    return AttentionBlocked(kt, pool, p);
  }

  const int64_t n_tasks = a.n_q * a.n_heads;
  const int n_threads = pool ? pool->size() : 1;
  std::vector<float> scratch(static_cast<size_t>(n_threads * 2 * a.head_dim));
  auto run = [&](int64_t t0, int64_t t1, int thread) {
    float* q_s = scratch.data() + static_cast<size_t>(thread) * 2 * a.head_dim;
    float* acc = q_s + a.head_dim;
    // Head-minor order: consecutive tasks of one query share its kv heads in cache.
    for (int64_t t = t0; t < t1; ++t) AttendOne(p, t / a.n_heads, t % a.n_heads, q_s, acc);
  };
  const int64_t work = n_tasks * std::max<int64_t>(a.n_kv, 1) * a.head_dim;
  if (pool == nullptr || n_threads == 1 || n_tasks == 1 || work < kMinParallelWork) {
    run(0, n_tasks, 0);
    return Status::Ok();
  }
  // Causal prefill makes later queries costlier; many small dynamic parts balance that.
  const int64_t parts = std::min<int64_t>(n_tasks, 8 * static_cast<int64_t>(n_threads));
  pool->ParallelFor(parts, [&](int64_t part, int thread) {
    int64_t t0, t1;
    SplitRange(n_tasks, parts, part, 1, &t0, &t1);
    run(t0, t1, thread);
  });
  return Status::Ok();
}

}  // namespace vlmd::engine::ops
