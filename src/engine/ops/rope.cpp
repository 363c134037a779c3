// RoPE op: angle tables in double, rotation through the KernelTable, tokens split over threads.
#include "engine/ops/rope.h"

#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/parallel.h"

namespace vlmd::engine::ops {
namespace {

Status ValidateRotation(int64_t n_rot, int64_t head_dim) {
  if (n_rot < 2 || n_rot % 2 != 0 || n_rot > head_dim) {
    return InvalidArgumentError("Rope: n_rot = " + std::to_string(n_rot) +
                                " must be even and in [2, head_dim = " +
                                std::to_string(head_dim) + "]");
  }
  return Status::Ok();
}

}  // namespace

int RopeSectionOfPair(const RopeParams& params, int64_t pair) {
  const auto& s = params.sections;
  const int64_t total = int64_t{s[0]} + s[1] + s[2] + s[3];
  if (total <= 0) return 0;
  const int64_t sector = pair % total;
  if (params.interleaved) {
    if (sector % 3 == 1 && sector < 3 * int64_t{s[1]}) return 1;
    if (sector % 3 == 2 && sector < 3 * int64_t{s[2]}) return 2;
    if (sector % 3 == 0 && sector < 3 * int64_t{s[0]}) return 0;
    return 3;
  }
  if (sector < s[0]) return 0;
  if (sector < int64_t{s[0]} + s[1]) return 1;
  if (sector < int64_t{s[0]} + s[1] + s[2]) return 2;
  return 3;
}

Status BuildRopeTable(const RopeParams& params, const int32_t* positions, int64_t n_tokens,
                      float* table, int positions_per_token) {
  if (params.n_rot < 2 || params.n_rot % 2 != 0) {
    return InvalidArgumentError("Rope: n_rot = " + std::to_string(params.n_rot) +
                                " must be even and >= 2");
  }
  if (!(params.freq_base > 0.0f) || !std::isfinite(params.freq_base) ||
      !std::isfinite(params.freq_scale) || !(params.attn_factor > 0.0f) ||
      !std::isfinite(params.attn_factor)) {
    return InvalidArgumentError("Rope: bad freq_base / freq_scale / attn_factor");
  }
  if (n_tokens < 0) return InvalidArgumentError("Rope: n_tokens < 0");
  if (positions_per_token != 1 && !(positions_per_token == 4 && params.multi_section())) {
    return InvalidArgumentError("Rope: " + std::to_string(positions_per_token) +
                                " positions per token (1, or 4 with sections)");
  }
  for (int32_t v : params.sections) {
    if (v < 0) return InvalidArgumentError("Rope: negative section size");
  }
  if (n_tokens > 0 && (positions == nullptr || table == nullptr)) {
    return InvalidArgumentError("Rope: null positions or table");
  }
  const int64_t half = params.n_rot / 2;
  // inv_freq[i] = freq_scale * base^(-2i/n_rot) / freq_factors[i], shared by all tokens.
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double f = params.freq_scale *
               std::pow(static_cast<double>(params.freq_base),
                        -2.0 * static_cast<double>(i) / static_cast<double>(params.n_rot));
    if (params.freq_factors != nullptr) {
      if (!(params.freq_factors[i] > 0.0f)) {
        return InvalidArgumentError("Rope: freq_factors[" + std::to_string(i) + "] <= 0");
      }
      f /= params.freq_factors[i];
    }
    inv_freq[static_cast<size_t>(i)] = f;
  }
  // Which of a token's positions each pair uses (always the first with one position per token).
  std::vector<int> section(static_cast<size_t>(half), 0);
  if (positions_per_token == 4) {
    for (int64_t i = 0; i < half; ++i) section[static_cast<size_t>(i)] = RopeSectionOfPair(params, i);
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* row = table + t * params.n_rot;
    const int32_t* pos = positions + t * positions_per_token;
    for (int64_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos[section[static_cast<size_t>(i)]]) *
                           inv_freq[static_cast<size_t>(i)];
      row[i] = static_cast<float>(std::cos(theta)) * params.attn_factor;
      row[half + i] = static_cast<float>(std::sin(theta)) * params.attn_factor;
    }
  }
  return Status::Ok();
}

Status RopeWithTable(const kernels::KernelTable& kt, ThreadPool* pool, float* x, int64_t n_tokens,
                     int64_t n_heads, int64_t head_dim, int64_t token_stride, const float* table,
                     int64_t n_rot, bool neox) {
  if (n_tokens < 0 || n_heads < 1 || head_dim < 1) {
    return InvalidArgumentError("Rope: bad shape [" + std::to_string(n_tokens) + ", " +
                                std::to_string(n_heads) + ", " + std::to_string(head_dim) + "]");
  }
  VLMD_RETURN_IF_ERROR(ValidateRotation(n_rot, head_dim));
  if (token_stride == 0) token_stride = n_heads * head_dim;
  if (token_stride < n_heads * head_dim) {
    return InvalidArgumentError("Rope: token_stride " + std::to_string(token_stride) +
                                " < n_heads * head_dim");
  }
  if (n_tokens > 0 && (x == nullptr || table == nullptr)) {
    return InvalidArgumentError("Rope: null x or table");
  }
  internal::ForRanges(pool, n_tokens, n_heads * n_rot, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      kt.rope(x + t * token_stride, n_heads, head_dim, table + t * n_rot, n_rot, neox);
    }
  });
  return Status::Ok();
}

Status Rope(const kernels::KernelTable& kt, ThreadPool* pool, const RopeParams& params, float* x,
            int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions) {
  VLMD_RETURN_IF_ERROR(ValidateRotation(params.n_rot, head_dim));
  if (n_tokens < 0) return InvalidArgumentError("Rope: n_tokens < 0");
  std::vector<float> table(static_cast<size_t>(n_tokens * params.n_rot));  // [n_tokens, n_rot]
  VLMD_RETURN_IF_ERROR(BuildRopeTable(params, positions, n_tokens, table.data()));
  return RopeWithTable(kt, pool, x, n_tokens, n_heads, head_dim, 0, table.data(), params.n_rot,
                       params.neox);
}

}  // namespace vlmd::engine::ops
