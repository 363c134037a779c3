// Attention op. Each (query row, head) task streams over the cache in blocks of kBlock rows:
//   s = K_blk q' (q' = scale * q), m' = max(m, max s), acc = acc * e^(m - m') + sum e^(s - m') V,
//   l = l * e^(m - m') + sum e^(s - m'),  and finally out = acc / l  (online softmax).
// The score block lives on the stack, so scratch is only q' and acc per thread.
//
// Many query rows at once (prefill, with sorted kv positions): per (kv head, block of query
// rows) job the scores are one GEMM S = Q K^T, masked and softmaxed row by row, and the output
// one GEMM P V, on f32 copies of that head's K and V^T. The per-query path above is bound by a
// horizontal sum per cache row; the GEMMs run at the matmul kernels' rate.
//
// In the fast precision (bf16_tiles) on every x86 table from avx2 up and every arm64 table, any
// number of query rows runs on the fused bf16 flash kernel instead (AttentionTiles below); the
// encoders' unmasked self-attention with its scores on int8 where the table has that kernel
// (int8_scores).
#include "engine/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/kernels/tile_bf16.h"
#include "engine/ops/matmul.h"
#include "engine/ops/parallel.h"
#include "engine/tensor/fp16.h"

namespace vlmd::engine::ops {
namespace {

// Cache rows per block: 1 KiB of scores, and K/V blocks of 128 rows x head_dim stay in L2.
constexpr int64_t kBlock = 128;
// Below this many multiply-adds the op stays on the calling thread: a decode step's cache of up
// to ~200 rows (9 heads x 64) took longer handed to two threads than on one (2 threads, q4_0
// SmolLM2-135M: 551-553 vs 516-543 tok/s decoding after 1 and 300 prompt tokens).
constexpr int64_t kMinParallelWork = 1 << 17;
// The blocked (GEMM) path: from this many query rows, in blocks of kQueryBlock rows per job.
constexpr int64_t kBlockedMinQueries = 16;
constexpr int64_t kQueryBlock = 64;
// Streaming path: cache rows per range task (a multiple of kBlock), and at most this many ranges.
constexpr int64_t kRangeRows = 256;
constexpr int64_t kMaxRanges = 16;

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
  const bool bf16 = a.kv_type == DType::kBF16;
  if (a.kv_type != DType::kF16 && a.kv_type != DType::kF32 && !bf16) {
    return bad("kv_type " + std::string(DTypeName(a.kv_type)) + " is not f16, f32 or bf16");
  }
  if (bf16 && (!a.bf16_tiles || a.causal)) return bad("bf16 operands need bf16_tiles, not causal");
  if (!std::isfinite(a.scale)) return bad("scale is not finite");
  if (a.n_q > 0 && !bf16 && (a.q == nullptr || a.out == nullptr)) return bad("null q or out");
  if (a.n_q > 0 && bf16 && (a.q_bf16 == nullptr || a.out_bf16 == nullptr)) {
    return bad("null q_bf16 or out_bf16");
  }
  if (!a.spans.empty()) {
    if (a.causal || a.n_q != a.n_kv) return bad("spans need self-attention (n_q == n_kv), not causal");
    for (const RowSpan& span : a.spans) {
      if (span.start < 0 || span.len < 1 || span.start + span.len > a.n_q) {
        return bad("span [" + std::to_string(span.start) + ", +" + std::to_string(span.len) +
                   ") outside the " + std::to_string(a.n_q) + " rows");
      }
    }
  }
  if (a.n_kv > 0 && (a.k == nullptr || a.v == nullptr)) return bad("null k or v");
  if (a.causal && ((a.n_q > 0 && a.q_pos == nullptr) || (a.n_kv > 0 && a.kv_pos == nullptr))) {
    return bad("causal mask needs q_pos and kv_pos");
  }
  if (a.window < 0 || (a.window > 0 && (!a.causal || (a.n_q > 0 && a.q_win_pos == nullptr)))) {
    return bad("a sliding window needs the causal mask and q_win_pos");
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

// The largest of x[0, n) that is not NaN; -inf when there is none. Eight independent maxima:
// one chain of compares (4-cycle latency each) was ~30% of a short decode attention step.
float MaxSkippingNan(const float* x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float m[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) m[u] = x[j + u] > m[u] ? x[j + u] : m[u];
  }
  for (; j < n; ++j) m[0] = x[j] > m[0] ? x[j] : m[0];
  for (int u = 1; u < 8; ++u) m[0] = m[u] > m[0] ? m[u] : m[0];
  return m[0];
}

// Streaming (online-softmax) attention of query row i against cache rows [j0, j1) for the
// query heads [h0, h0 + n_h), which share one kv head. Each K / V block is loaded (and
// converted from f16) once for all of them by the group kernels. Per head hh (0 .. n_h):
// state[2 hh] = running max m, state[2 hh + 1] = running sum l of exp(score - m),
// acc[hh * head_dim ..] = the running sum of exp(score - m) * v. The ranges of one (i, head) are
// merged by MergePartials. q_s: n_h * head_dim floats of scratch, s: n_h * kBlock.
void AttendHeadsRange(const Plan& p, int64_t i, int64_t h0, int64_t n_h, int64_t j0, int64_t j1,
                      float* q_s, float* s, float* state, float* acc) {
  const AttentionArgs& a = *p.a;
  const int64_t hd = a.head_dim, group = n_h, g = h0 / p.group;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t hh = 0; hh < group; ++hh) {
    const float* q = a.q + i * a.q_row_stride + (h0 + hh) * hd;
    for (int64_t d = 0; d < hd; ++d) q_s[hh * hd + d] = q[d] * a.scale;
    state[2 * hh] = kNegInf;
    state[2 * hh + 1] = 0.0f;
  }
  std::fill(acc, acc + group * hd, 0.0f);
  const size_t head_offset = static_cast<size_t>(g * a.kv_head_stride) * p.elem_bytes;
  const auto* k_base = static_cast<const uint8_t*>(a.k) + head_offset;
  const auto* v_base = static_cast<const uint8_t*>(a.v) + head_offset;
  const bool mask_each = a.causal && !p.sorted_kv_pos;  // sorted: the range is the visible rows
  for (int64_t b0 = j0; b0 < j1; b0 += kBlock) {
    const int64_t nb = std::min(kBlock, j1 - b0);
    p.dot(q_s, group, k_base + b0 * p.kv_row_bytes, p.kv_row_bytes, nb, hd, s, kBlock);
    int64_t masked_heads = 0;
    for (int64_t hh = 0; hh < group; ++hh) {
      float* s_h = s + hh * kBlock;
      if (mask_each) {
        for (int64_t j = 0; j < nb; ++j) {
          const int32_t kp = a.kv_pos[b0 + j];
          if (kp > a.q_pos[i] || (a.window > 0 && a.q_win_pos[i] - kp >= a.window)) s_h[j] = kNegInf;
        }
      }
      const float block_max = MaxSkippingNan(s_h, nb);
      float& m = state[2 * hh];
      float& l = state[2 * hh + 1];
      float* acc_h = acc + hh * hd;
      if (block_max == kNegInf) {  // masked or NaN (the max skips NaN): look only here
        const bool nan = std::any_of(s_h, s_h + nb, [](float v) { return std::isnan(v); });
        std::fill(s_h, s_h + nb, 0.0f);  // weights 0
        if (!nan) {                        // the whole block is masked for this query
          ++masked_heads;
          continue;
        }
        // Only NaN (and masked) scores: poison the head's partial result, as a NaN among finite
        // scores does through the sums. m = +inf makes MergePartials weigh it with NaN.
        m = std::numeric_limits<float>::infinity();
        l = std::numeric_limits<float>::quiet_NaN();
        std::fill(acc_h, acc_h + hd, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      if (block_max > m) {
        const float c = std::exp(m - block_max);  // m = -inf on the first block: c = 0
        l *= c;
        for (int64_t d = 0; d < hd; ++d) acc_h[d] *= c;
        m = block_max;
      }
      l += p.exp_sub_sum(s_h, m, s_h, nb);
    }
    // The mask depends on positions only, so a masked block is masked for every head: its V
    // rows (future positions, possibly never written) are not read at all.
    if (masked_heads == group) continue;
    p.axpy(s, kBlock, group, v_base + b0 * p.kv_row_bytes, p.kv_row_bytes, nb, hd, acc);
  }
}

// out = sum_c acc_c exp(m_c - M) / sum_c l_c exp(m_c - M), M = max_c m_c, over the partial
// results of one (query, head); zeros when no cache row was visible.
void MergePartials(const float* states, const float* accs, int64_t n_parts, int64_t state_stride,
                   int64_t acc_stride, int64_t hd, float* out) {
  float big_m = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < n_parts; ++c) big_m = std::max(big_m, states[c * state_stride]);
  std::fill(out, out + hd, 0.0f);
  if (big_m == -std::numeric_limits<float>::infinity()) return;
  float l = 0.0f;
  for (int64_t c = 0; c < n_parts; ++c) {
    const float m_c = states[c * state_stride];
    if (m_c == -std::numeric_limits<float>::infinity()) continue;
    const float w = std::exp(m_c - big_m);
    l += states[c * state_stride + 1] * w;
    const float* acc = accs + c * acc_stride;
    for (int64_t d = 0; d < hd; ++d) out[d] += acc[d] * w;
  }
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv_l;
}

// K and V^T of every kv head in f32, shared by all query blocks of the blocked path:
// k [n_kv_heads][n_kv, hd], vt [n_kv_heads][hd, n_kv].
struct BlockedKv {
  const float* k = nullptr;
  const float* vt = nullptr;
};

// Converts cache rows [j0, j1) of kv head g into `kv` (as laid out above), V transposed in
// 16-row blocks so that each block's reads stay in a few cache lines per row.
void ConvertKvRows(const Plan& p, int64_t g, int64_t j0, int64_t j1, float* k, float* vt) {
  const AttentionArgs& a = *p.a;
  const int64_t hd = a.head_dim, n_kv = a.n_kv;
  const size_t head_offset = static_cast<size_t>(g * a.kv_head_stride) * p.elem_bytes;
  const auto* k_base = static_cast<const uint8_t*>(a.k) + head_offset;
  const auto* v_base = static_cast<const uint8_t*>(a.v) + head_offset;
  float* k_g = k + g * n_kv * hd;
  float* vt_g = vt + g * hd * n_kv;
  float v_stack[16 * 256];  // the usual head_dim; larger ones take the heap
  std::vector<float> v_heap(hd > 256 ? static_cast<size_t>(16 * hd) : 0);
  float* v_rows = hd > 256 ? v_heap.data() : v_stack;
  for (int64_t b0 = j0; b0 < j1; b0 += 16) {
    const int64_t b1 = std::min(j1, b0 + 16);
    for (int64_t j = b0; j < b1; ++j) {
      const uint8_t* kr = k_base + j * p.kv_row_bytes;
      const uint8_t* vr = v_base + j * p.kv_row_bytes;
      float* v_row = v_rows + (j - b0) * hd;
      if (a.kv_type == DType::kF16) {
        F16ToF32Row(reinterpret_cast<const uint16_t*>(kr), k_g + j * hd, hd);
        F16ToF32Row(reinterpret_cast<const uint16_t*>(vr), v_row, hd);
      } else {
        std::copy_n(reinterpret_cast<const float*>(kr), hd, k_g + j * hd);
        std::copy_n(reinterpret_cast<const float*>(vr), hd, v_row);
      }
    }
    for (int64_t e = 0; e < hd; ++e) {
      float* dst = vt_g + e * n_kv;
      for (int64_t j = b0; j < b1; ++j) dst[j] = v_rows[(j - b0) * hd + e];
    }
  }
}

// One job of the blocked path: kv head g, query rows [i0, i1), every query head of g's group.
// `scores` holds kQueryBlock rows of n_kv.
Status AttendBlock(const kernels::KernelTable& kt, const Plan& p, const BlockedKv& kv, int64_t g,
                   int64_t i0, int64_t i1, float* scores) {
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
  // K's first n_vis rows; V^T's rows are n_kv apart, of which the first n_vis values are used.
  const WeightView k_view{DType::kF32, n_vis, hd, kv.k + g * a.n_kv * hd, 0};
  const WeightView v_view{DType::kF32, hd, n_vis, kv.vt + g * hd * a.n_kv,
                          static_cast<size_t>(a.n_kv) * sizeof(float)};
  for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
    VLMD_RETURN_IF_ERROR(MatMul(kt, nullptr, k_view, a.q + i0 * a.q_row_stride + h * hd, nq,
                                a.q_row_stride, scores, n_vis, nullptr));
    for (int64_t i = 0; i < nq; ++i) {
      float* row = scores + i * n_vis;
      int64_t vis = n_vis;
      if (a.causal) {
        vis = std::upper_bound(a.kv_pos, a.kv_pos + n_vis, a.q_pos[i0 + i]) - a.kv_pos;
      }
      for (int64_t j = 0; j < vis; ++j) row[j] *= a.scale;
      if (vis > 0) kt.softmax(row, vis);
      std::fill(row + vis, row + n_vis, 0.0f);  // masked: probability 0
    }
    VLMD_RETURN_IF_ERROR(MatMul(kt, nullptr, v_view, scores, nq, n_vis,
                                a.out + i0 * a.out_row_stride + h * hd, a.out_row_stride, nullptr));
  }
  return Status::Ok();
}

// The blocked path: K and V^T converted to f32 once per kv head (in 64-row jobs over the pool),
// then one job per (kv head, block of kQueryBlock queries) of two f32 GEMMs. Converting per job
// instead repeated the whole conversion for every query block (a 1152-token prompt: 18 times).
Status AttentionBlocked(const kernels::KernelTable& kt, ThreadPool* pool, const Plan& p) {
  const AttentionArgs& a = *p.a;
  const int64_t hd = a.head_dim, n_kv = a.n_kv;
  // One buffer: K, V^T, then a block of scores per worker.
  const int workers = pool != nullptr ? pool->size() : 1;
  const size_t kv_size = static_cast<size_t>(a.n_kv_heads * n_kv * hd);
  const size_t scores_size = static_cast<size_t>(kQueryBlock * n_kv);
  std::vector<float> local;
  std::vector<float>& buf = a.kv_scratch != nullptr ? *a.kv_scratch : local;
  const size_t needed = 2 * kv_size + static_cast<size_t>(workers) * scores_size;
  if (buf.size() < needed) buf.resize(needed);
  float* const k = buf.data();
  float* const vt = k + kv_size;
  float* const scores = vt + kv_size;
  constexpr int64_t kConvertRows = 64;
  const int64_t row_jobs = (n_kv + kConvertRows - 1) / kConvertRows;
  internal::ForTasks(pool, a.n_kv_heads * row_jobs, [&](int64_t job, int /*worker*/) {
    const int64_t g = job / row_jobs, j0 = (job % row_jobs) * kConvertRows;
    ConvertKvRows(p, g, j0, std::min(n_kv, j0 + kConvertRows), k, vt);
  });
  const BlockedKv kv{k, vt};
  const int64_t q_blocks = (a.n_q + kQueryBlock - 1) / kQueryBlock;
  const int64_t jobs = a.n_kv_heads * q_blocks;
  return internal::ForJobs(pool, jobs, [&](int64_t job, int worker) {
    const int64_t g = job % a.n_kv_heads, i0 = (job / a.n_kv_heads) * kQueryBlock;
    return AttendBlock(kt, p, kv, g, i0, std::min(a.n_q, i0 + kQueryBlock),
                       scores + static_cast<size_t>(worker) * scores_size);
  });
}

// The tile path (AttentionArgs::bf16_tiles): K of each kv head as the columns of Q K^T and V^T
// as those of P V, in bf16 tiles, then one job per (query head, block of kTileQueryBlock
// queries) of the fused kernel (scores and probabilities of 32 queries x 128 keys in L1), which
// takes each query's visible keys as a range. Causal (and windowed), the keys are laid out in
// position order (TileKeys) and only those some query sees are converted (the others may never
// have been written), starting at a multiple of the kernel's chunk, so that a row meets the same
// chunk boundaries whatever the call; the kernel's reads past a row's range (to its 16- or 32-key
// tile edge, weighted 0) see real keys or zero padding. Q is scaled by scale * log2(e) (the
// kernel works in base 2) before its rounding to bf16.
constexpr int64_t kTileQueryBlock = 128;
constexpr int64_t kMaxTileHeadDim = 512;  // the q row's f32 staging buffer below

// The cache rows as a run of consecutive positions, possibly stored rotated (a sliding-window
// ring that wrapped: positions P - rows + 1 .. P, row j holding the one that is j modulo rows;
// a plain cache is the run 0 .. n - 1 unrotated): the row of the smallest position, or -1 when
// kv_pos is not such a run.
int64_t RotatedRunStart(const int32_t* kv_pos, int64_t n) {
  if (n == 0) return -1;
  const int64_t start = std::min_element(kv_pos, kv_pos + n) - kv_pos;
  for (int64_t t = 0; t < n; ++t) {
    if (int64_t{kv_pos[(start + t) % n]} != int64_t{kv_pos[start]} + t) return -1;
  }
  return start;
}

// The keys of a causal call in position order, as the tile kernel reads them: key v is cache row
// row(v) (-1: none, zero padding), and query i sees keys [first[i], end[i]). A run of consecutive
// positions (RotatedRunStart; a plain cache, or a ring, wrapped or not): key v is position
// base + v with base the smallest position rounded down to the kernel's chunk, so that a
// position always has the same lane and chunk, whichever rows hold the run (a ring whose oldest
// row happens to be row 0 is sorted but does not start at position 0). Other sorted positions
// (gaps): key v is row v. Only keys [lo, hi) are packed (lo a chunk multiple).
struct TileKeys {
  int64_t rotated_start = -1;  // RotatedRunStart, or -1 (sorted, not consecutive)
  int64_t base = 0;            // a run: the position of key 0
  int64_t lo = 0, hi = 0;      // the keys some query sees, lo rounded down to a chunk
  std::vector<int32_t> first, end;  // per query, relative to lo

  int64_t row(const AttentionArgs& a, int64_t v) const {
    if (rotated_start < 0) return v;
    const int64_t offset = base + v - a.kv_pos[rotated_start];
    return offset < 0 ? -1 : (rotated_start + offset) % a.n_kv;
  }
};

TileKeys CausalTileKeys(const AttentionArgs& a, int64_t rotated_start) {
  constexpr int64_t kChunk = kernels::kTileAttentionChunk;
  TileKeys t;
  t.rotated_start = rotated_start;
  const int32_t* pos = a.kv_pos;
  int64_t n_keys = a.n_kv;
  if (rotated_start >= 0) {
    const int64_t min_pos = a.kv_pos[rotated_start];
    t.base = min_pos / kChunk * kChunk;
    n_keys = min_pos + a.n_kv - t.base;
  }
  // The first key at a position > p (positions of keys ascend).
  auto after = [&](int64_t p) -> int64_t {
    if (rotated_start < 0) return std::upper_bound(pos, pos + a.n_kv, p) - pos;
    const int64_t min_pos = a.kv_pos[rotated_start];
    return std::clamp<int64_t>(p + 1, min_pos, min_pos + a.n_kv) - t.base;
  };
  const auto n_q = static_cast<size_t>(a.n_q);
  t.first.resize(n_q);
  t.end.resize(n_q);
  int64_t lo = n_keys, hi = 0;
  for (size_t i = 0; i < n_q; ++i) {
    const int64_t first = std::max(a.window > 0 ? after(int64_t{a.q_win_pos[i]} - a.window)
                                                : int64_t{0},
                                   rotated_start >= 0 ? a.kv_pos[rotated_start] - t.base : 0);
    const int64_t end = after(a.q_pos[i]);
    t.first[i] = static_cast<int32_t>(first);
    t.end[i] = static_cast<int32_t>(end);
    if (end > first) {
      lo = std::min(lo, first);
      hi = std::max(hi, end);
    }
  }
  t.lo = hi > lo ? lo / kChunk * kChunk : 0;
  t.hi = std::max(hi, t.lo);
  for (size_t i = 0; i < n_q; ++i) {
    t.first[i] -= static_cast<int32_t>(t.lo);
    t.end[i] -= static_cast<int32_t>(t.lo);
  }
  return t;
}

bool UsesTileAttention(const kernels::KernelTable& kt, const Plan& p, int64_t rotated_start) {
  const AttentionArgs& a = *p.a;
  const bool converts = a.kv_type == DType::kBF16  ? true
                        : a.kv_type == DType::kF16 ? kt.f16_to_bf16 != nullptr
                                                   : kt.to_bf16 != nullptr;
  return a.bf16_tiles && Bf16AttentionRuns(kt, a.head_dim) && converts && a.n_kv > 0 &&
         (!a.causal || p.sorted_kv_pos || rotated_start >= 0);
}

// The int8 scores (AttentionArgs::int8_scores): unmasked, f32 operands, a table that has them.
bool UsesInt8Scores(const kernels::KernelTable& kt, const AttentionArgs& a) {
  return a.int8_scores && !a.causal && a.kv_type == DType::kF32 && a.q != nullptr &&
         kt.tile_attention_i8 != nullptr && kt.quantize_queries_i8 != nullptr &&
         kt.pack_keys_i8 != nullptr;
}

Status AttentionTiles(const kernels::KernelTable& kt, ThreadPool* pool, const Plan& p,
                      int64_t rotated_start) {
  const AttentionArgs& a = *p.a;
  const bool i8 = UsesInt8Scores(kt, a);
  const int64_t hd = a.head_dim, n_q = a.n_q;
  TileKeys keys;
  int64_t n_kv = a.n_kv;  // the keys packed: causal, those some query sees
  if (a.causal) {
    keys = CausalTileKeys(a, rotated_start);
    n_kv = keys.hi - keys.lo;
    if (n_kv == 0) {  // nothing visible to any query: zeros
      for (int64_t i = 0; i < n_q; ++i) {
        std::fill_n(a.out + i * a.out_row_stride, a.n_heads * hd, 0.0f);
      }
      return Status::Ok();
    }
  }
  const int64_t hd_pad = kernels::TileBf16Matrix::PaddedK(hd);
  const int64_t kv_pad = kernels::TileBf16Matrix::PaddedK(n_kv);
  const kernels::TilePackFn pack_rows =
      kt.tile_pack_rows != nullptr ? kt.tile_pack_rows : &kernels::TileBf16Matrix::PackRows;
  const kernels::TilePackFn pack_columns = kt.tile_pack_columns != nullptr
                                               ? kt.tile_pack_columns
                                               : &kernels::TileBf16Matrix::PackColumns;
  // bf16 storage, in elements: K and V rows of one kv head at a time per worker while packing,
  // the packed K and V^T of every kv head, and per worker a query block, its output and the
  // kernel's f32 accumulator block. The int8 scores' operands take less room than the bf16 ones
  // they replace: K's panels (hd_pad bytes a key, not 2 hd_pad) with a scale and a bias per key
  // (8 bytes), a query block's rows (hd_pad bytes each) with a scale per row.
  const int workers = pool != nullptr ? pool->size() : 1;
  const size_t rows_elems = static_cast<size_t>(2 * n_kv * hd_pad);
  const size_t k_tiles_elems = kernels::TileBf16Matrix::PanelElements(n_kv, hd_pad);
  const size_t v_tiles_elems = kernels::TileBf16Matrix::PanelElements(hd, kv_pad);
  const size_t q_elems = static_cast<size_t>(kTileQueryBlock * hd_pad);
  const size_t o_block_floats = static_cast<size_t>(32 * (hd_pad + 16));
  auto whole_lines = [](size_t elems) { return (elems + 31) / 32 * 32; };  // 64-byte multiples
  const size_t per_head = whole_lines(k_tiles_elems) + whole_lines(v_tiles_elems);
  const size_t per_worker =
      whole_lines(rows_elems) + 2 * whole_lines(q_elems) + 2 * whole_lines(o_block_floats);
  const size_t total_elems = per_head * static_cast<size_t>(a.n_kv_heads) +
                             per_worker * static_cast<size_t>(workers) + 32;
  std::vector<float> local;
  std::vector<float>& scratch = a.kv_scratch != nullptr ? *a.kv_scratch : local;
  if (scratch.size() * 2 < total_elems) scratch.resize((total_elems + 1) / 2);
  // 64-byte aligned base (the f32 accumulator block is read with aligned loads).
  auto* base = reinterpret_cast<uint16_t*>(
      (reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t{63});
  uint16_t* const heads = base;
  uint16_t* const worker_area = base + per_head * static_cast<size_t>(a.n_kv_heads);
  auto k_tiles = [&](int64_t g) { return heads + per_head * static_cast<size_t>(g); };
  auto v_tiles = [&](int64_t g) { return k_tiles(g) + whole_lines(k_tiles_elems); };
  auto mine = [&](int worker) { return worker_area + per_worker * static_cast<size_t>(worker); };
  // The int8 keys of kv head g in its K area: panels, then scales, then biases.
  auto k_i8 = [&](int64_t g) { return reinterpret_cast<int8_t*>(k_tiles(g)); };
  auto k_scales = [&](int64_t g) {
    return reinterpret_cast<float*>(k_i8(g) + kernels::KeyPanelsI8Bytes(n_kv, hd_pad));
  };
  auto k_biases = [&](int64_t g) {
    return reinterpret_cast<int32_t*>(k_scales(g) + kernels::KeyPanelsI8Keys(n_kv));
  };

  // 1. K and V of each kv head to bf16 rows, then to tiles.
  internal::ForTasks(pool, a.n_kv_heads, [&](int64_t g, int worker) {
    if (a.kv_type == DType::kBF16) {  // packed straight from the caller's rows
      const auto* k16 = static_cast<const uint16_t*>(a.k) + g * a.kv_head_stride;
      const auto* v16 = static_cast<const uint16_t*>(a.v) + g * a.kv_head_stride;
      pack_rows(k16, a.kv_row_stride, n_kv, hd, hd_pad, k_tiles(g));
      pack_columns(v16, a.kv_row_stride, hd, n_kv, kv_pad, v_tiles(g));
      return;
    }
    uint16_t* k16 = mine(worker);
    uint16_t* v16 = k16 + n_kv * hd_pad;
    const size_t head_offset = static_cast<size_t>(g * a.kv_head_stride) * p.elem_bytes;
    if (i8) {  // unmasked f32 keys: row j is key j
      float mean[kMaxTileHeadDim];
      kt.pack_keys_i8(static_cast<const float*>(a.k) + g * a.kv_head_stride, a.kv_row_stride,
                      n_kv, hd, hd_pad, k_i8(g), k_scales(g), k_biases(g), mean);
    }
    for (int64_t j = 0; j < n_kv; ++j) {
      const int64_t row = keys.row(a, keys.lo + j);
      for (int kv = i8 ? 1 : 0; kv < 2; ++kv) {
        uint16_t* dst = (kv == 0 ? k16 : v16) + j * hd_pad;
        if (row < 0) {  // a position before the ring's oldest (masked for every query)
          std::fill(dst, dst + hd_pad, uint16_t{0});
          continue;
        }
        const auto* src = static_cast<const uint8_t*>(kv == 0 ? a.k : a.v) + head_offset +
                          static_cast<size_t>(row) * p.kv_row_bytes;
        if (a.kv_type == DType::kF16) {
          kt.f16_to_bf16(reinterpret_cast<const uint16_t*>(src), dst, hd);
        } else {
          kt.to_bf16(reinterpret_cast<const float*>(src), dst, hd);
        }
        std::fill(dst + hd, dst + hd_pad, uint16_t{0});
      }
    }
    if (!i8) pack_rows(k16, hd_pad, n_kv, hd, hd_pad, k_tiles(g));
    pack_columns(v16, hd_pad, hd, n_kv, kv_pad, v_tiles(g));
  });

  // 2. One job per (query head, block of queries).
  const float q_scale = a.scale * 1.44269504088896341f;  // log2(e): scores in base 2
  const int64_t q_blocks = (n_q + kTileQueryBlock - 1) / kTileQueryBlock;
  internal::ForTasks(pool, a.n_heads * q_blocks, [&](int64_t job, int worker) {
    const int64_t h = job % a.n_heads, i0 = (job / a.n_heads) * kTileQueryBlock;
    const int64_t rows = std::min(kTileQueryBlock, n_q - i0);
    uint16_t* q16 = mine(worker) + whole_lines(rows_elems);
    uint16_t* o16 = q16 + whole_lines(q_elems);
    auto* o_block = reinterpret_cast<float*>(o16 + whole_lines(q_elems));
    const int64_t g = h / p.group;
    kernels::TileAttentionArgs t{.q = q16, .ldq = hd_pad, .k_tiles = k_tiles(g),
                                 .v_tiles = v_tiles(g), .v_k = kv_pad, .n_q = rows,
                                 .n_kv = n_kv, .hd = hd, .hd_pad = hd_pad, .out = o16,
                                 .ldo = hd_pad, .o_scratch = o_block};
    if (i8) {
      auto* q_u8 = reinterpret_cast<uint8_t*>(q16);
      auto* q_scales = reinterpret_cast<float*>(q_u8 + kTileQueryBlock * hd_pad);
      kt.quantize_queries_i8(a.q + i0 * a.q_row_stride + h * hd, a.q_row_stride, rows, hd,
                             hd_pad, q_scale, q_u8, q_scales);
      const int64_t padded = (rows + 31) / 32 * 32;  // the kernel reads whole 32-row blocks
      std::fill(q_u8 + rows * hd_pad, q_u8 + padded * hd_pad, uint8_t{128});
      std::fill(q_scales + rows, q_scales + padded, 0.0f);
      t.q = nullptr;
      t.k_tiles = nullptr;
      t.q_u8 = q_u8;
      t.ldq = hd_pad;
      t.q_scale = q_scales;
      t.k_i8 = k_i8(g);
      t.k_scale = k_scales(g);
      t.k_bias = k_biases(g);
    } else if (a.q_bf16 != nullptr) {
      const uint16_t* q = a.q_bf16 + i0 * a.q_row_stride + h * hd;
      if (hd == hd_pad) {  // whole tile steps: read in place
        t.q = q;
        t.ldq = a.q_row_stride;
      } else {  // the next head's values follow: copy with zero padding
        for (int64_t i = 0; i < kTileQueryBlock; ++i) {
          uint16_t* dst = q16 + i * hd_pad;
          if (i < rows) std::copy_n(q + i * a.q_row_stride, hd, dst);
          std::fill(dst + (i < rows ? hd : 0), dst + hd_pad, uint16_t{0});
        }
      }
      t.out = a.out_bf16 + i0 * a.out_row_stride + h * hd;
      t.ldo = a.out_row_stride;
    } else {
      float row[kMaxTileHeadDim];
      for (int64_t i = 0; i < kTileQueryBlock; ++i) {
        uint16_t* dst = q16 + i * hd_pad;
        if (i < rows) {
          const float* q = a.q + (i0 + i) * a.q_row_stride + h * hd;
          for (int64_t e = 0; e < hd; ++e) row[e] = q[e] * q_scale;
          kt.to_bf16(row, dst, hd);
          std::fill(dst + hd, dst + hd_pad, uint16_t{0});
        } else {
          std::fill(dst, dst + hd_pad, uint16_t{0});  // the kernel reads whole 32-row blocks
        }
      }
    }
    if (a.causal) {
      t.kv_first = keys.first.data() + i0;
      t.kv_end = keys.end.data() + i0;
    }
    (i8 ? kt.tile_attention_i8 : kt.tile_attention)(t);
    if (a.out_bf16 != nullptr) return;  // written in place
    for (int64_t i = 0; i < rows; ++i) {
      BF16ToF32Row(o16 + i * hd_pad, a.out + (i0 + i) * a.out_row_stride + h * hd, hd);
    }
  });
  return Status::Ok();
}

// Each span as a self-attention call of its own over its rows (Validate checked them).
Status AttentionInSpans(const kernels::KernelTable& kt, ThreadPool* pool, const AttentionArgs& a) {
  const size_t elem_bytes = a.kv_type == DType::kF32 ? 4 : 2;
  for (const RowSpan& span : a.spans) {
    AttentionArgs sub = a;
    sub.spans = {};
    sub.n_q = sub.n_kv = span.len;
    const size_t kv_offset = static_cast<size_t>(span.start * a.kv_row_stride) * elem_bytes;
    sub.k = static_cast<const uint8_t*>(a.k) + kv_offset;
    sub.v = static_cast<const uint8_t*>(a.v) + kv_offset;
    if (a.q != nullptr) sub.q = a.q + span.start * a.q_row_stride;
    if (a.out != nullptr) sub.out = a.out + span.start * a.out_row_stride;
    if (a.q_bf16 != nullptr) sub.q_bf16 = a.q_bf16 + span.start * a.q_row_stride;
    if (a.out_bf16 != nullptr) sub.out_bf16 = a.out_bf16 + span.start * a.out_row_stride;
    VLMD_RETURN_IF_ERROR(Attention(kt, pool, sub));
  }
  return Status::Ok();
}

}  // namespace

Status Attention(const kernels::KernelTable& kt, ThreadPool* pool, const AttentionArgs& args) {
  VLMD_RETURN_IF_ERROR(Validate(args));
  AttentionArgs a = args;  // with defaults resolved
  if (a.q_row_stride == 0) a.q_row_stride = a.n_heads * a.head_dim;
  if (a.out_row_stride == 0) a.out_row_stride = a.n_heads * a.head_dim;
  if (a.kv_row_stride == 0) a.kv_row_stride = a.n_kv_heads * a.head_dim;
  if (a.kv_head_stride == 0) a.kv_head_stride = a.head_dim;
  if (a.window > 0 && a.n_q > 0 && a.n_kv > 0 && !a.bf16_tiles) {
    // A window that reaches back past every cache row for every query masks nothing (a prompt
    // shorter than the window): drop it, so that the call keeps the blocked path. Not with
    // bf16_tiles: the tile path keeps the window itself, and whether a window is dropped depends
    // on the call's other rows.
    const int32_t min_kv = *std::min_element(a.kv_pos, a.kv_pos + a.n_kv);
    const int32_t max_q = *std::max_element(a.q_win_pos, a.q_win_pos + a.n_q);
    if (int64_t{max_q} - a.window < min_kv) {
      a.window = 0;
      a.q_win_pos = nullptr;
    }
  }
  if (a.n_q == 0) return Status::Ok();
  if (!a.spans.empty()) return AttentionInSpans(kt, pool, a);

  Plan p;
  p.a = &a;
  const bool f16 = a.kv_type == DType::kF16;
  p.dot = f16 ? kt.dot_rows_f16 : kt.dot_rows_f32;
  p.axpy = f16 ? kt.axpy_rows_f16 : kt.axpy_rows_f32;
  p.exp_sub_sum = kt.exp_sub_sum;
  p.elem_bytes = a.kv_type == DType::kF32 ? 4 : 2;
  p.kv_row_bytes = static_cast<size_t>(a.kv_row_stride) * p.elem_bytes;
  p.group = a.n_heads / a.n_kv_heads;
  p.sorted_kv_pos = a.causal && std::is_sorted(a.kv_pos, a.kv_pos + a.n_kv);
  const int64_t rotated_start = a.causal && a.bf16_tiles ? RotatedRunStart(a.kv_pos, a.n_kv) : -1;
  if (UsesTileAttention(kt, p, rotated_start)) return AttentionTiles(kt, pool, p, rotated_start);
  // Otherwise a sliding window runs on the streaming path (each query's rows a range of the cache).
  if (a.kv_type == DType::kBF16) {
    return UnimplementedError("Attention: bf16 operands without the tile kernels");
  }
  if (a.window == 0 && a.n_q >= kBlockedMinQueries && a.n_kv > 0 && (!a.causal || p.sorted_kv_pos)) {
    return AttentionBlocked(kt, pool, p);
  }

  // Streaming path (decode, short prompts): tasks of (query, kv head, range of cache rows), each
  // over every query head of its kv head (the group kernels read a K/V row once for all of
  // them; one head per task loaded each row group-size times). Long caches are cut into ranges
  // of about kRangeRows so that the threads have enough tasks even when a decode step has one
  // query and few kv heads (flash-decoding); the ranges are merged afterwards. The cut depends
  // on the shapes only, so results do not depend on the thread count.
  const int n_threads = pool ? pool->size() : 1;
  const int64_t hd = a.head_dim, group = p.group;
  const int64_t work = a.n_q * a.n_heads * std::max<int64_t>(a.n_kv, 1) * hd;
  const bool parallel = pool != nullptr && n_threads > 1 && work >= kMinParallelWork;
  const int64_t n_ranges = std::clamp<int64_t>((a.n_kv + kRangeRows - 1) / kRangeRows, 1,
                                               kMaxRanges);
  // A single task (one query, one kv head, one range: multi-query attention over a short cache)
  // would leave the other threads idle; then each task takes one query head.
  const int64_t per_task = a.n_q * a.n_kv_heads * n_ranges == 1 ? 1 : group;
  const int64_t head_blocks = a.n_heads / per_task;
  const int64_t n_tasks = a.n_q * head_blocks * n_ranges;
  // Per task its heads' states (m, l) and accumulators, per thread the scaled queries and a
  // block of scores per head: in the caller's scratch when given (a decode step runs this once
  // per layer; allocating and zeroing it each time was measurable).
  const int64_t state_size = 2 * per_task, acc_size = per_task * hd;
  const int64_t thread_size = per_task * (hd + kBlock);
  const size_t scratch_size =
      static_cast<size_t>(n_tasks * (state_size + acc_size) + n_threads * thread_size);
  std::vector<float> local;
  std::vector<float>& scratch = a.kv_scratch != nullptr ? *a.kv_scratch : local;
  if (scratch.size() < scratch_size) scratch.resize(scratch_size);
  float* const states = scratch.data();
  float* const accs = states + n_tasks * state_size;
  float* const thread_scratch = accs + n_tasks * acc_size;
  auto run_task = [&](int64_t t, int thread) {
    const int64_t r = t % n_ranges, hb = (t / n_ranges) % head_blocks;
    const int64_t i = t / (n_ranges * head_blocks);
    int64_t first = 0, n_visible = a.n_kv;
    if (a.causal && p.sorted_kv_pos) {
      n_visible = std::upper_bound(a.kv_pos, a.kv_pos + a.n_kv, a.q_pos[i]) - a.kv_pos;
      if (a.window > 0) {  // the window's first row: kv_pos > q_win_pos - window
        first = std::upper_bound(a.kv_pos, a.kv_pos + n_visible, a.q_win_pos[i] - a.window) - a.kv_pos;
      }
    }
    int64_t j0, j1;
    SplitRange(n_visible - first, n_ranges, r, kBlock, &j0, &j1);
    j0 += first;
    j1 += first;
    float* const mine = thread_scratch + thread * thread_size;
    AttendHeadsRange(p, i, hb * per_task, per_task, j0, j1, mine, mine + per_task * hd,
                     states + t * state_size, accs + t * acc_size);
  };
  internal::ForTasks(parallel ? pool : nullptr, n_tasks, run_task);
  for (int64_t i = 0; i < a.n_q; ++i) {
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t hb = h / per_task, hh = h % per_task;
      const int64_t t0 = (i * head_blocks + hb) * n_ranges;  // first range of (i, hb)
      MergePartials(states + t0 * state_size + 2 * hh, accs + t0 * acc_size + hh * hd, n_ranges,
                    state_size, acc_size, hd, a.out + i * a.out_row_stride + h * hd);
    }
  }
  return Status::Ok();
}

bool Bf16AttentionRuns(const kernels::KernelTable& kt, int64_t head_dim) {
  return kt.tile_attention != nullptr && kt.to_bf16 != nullptr && head_dim <= kMaxTileHeadDim;
}

}  // namespace vlmd::engine::ops
