// Rotary position embedding (RoPE) on [n_tokens, n_heads, head_dim] f32 activations, in the two
// llama.cpp layouts: "normal" (adjacent pairs, LLaMA) and "neox" (halves, GPT-NeoX / Qwen / ...).
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::ops {

struct RopeParams {
  int64_t n_rot = 0;            // rotated values per head: even, 2 <= n_rot <= head_dim
  float freq_base = 10000.0f;   // theta base (GGUF rope.freq_base)
  float freq_scale = 1.0f;      // linear position scaling (1 / GGUF rope.scaling.factor)
  bool neox = false;            // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  // Multiplies the table's cos and sin, so every rotated value (not the n_rot.. head_dim rest):
  // ggml rope's mscale, GGUF rope.scaling.attn_factor.
  float attn_factor = 1.0f;
  // [n_rot/2] per-pair divisors of the angle (LLaMA-3 "rope_freqs" tensor), or nullptr.
  const float* freq_factors = nullptr;
  // Multi-section RoPE (Qwen2-VL "M-RoPE", Qwen3-VL interleaved "IMRoPE"): every token has four
  // positions (t, h, w, e) and pair i rotates by the one its section names (RopeSectionOfPair);
  // the frequency index stays i. All zero: one position per token.
  std::array<int32_t, 4> sections{};
  bool interleaved = false;  // IMRoPE: sections dealt round-robin t, h, w instead of in blocks
  bool multi_section() const { return sections[0] + sections[1] + sections[2] + sections[3] > 0; }
};

// Which of the four positions (0 = t, 1 = h, 2 = w, 3 = e) rotary pair `pair` uses under the
// multi-section rule of params (ggml_mrope_cache_init, ggml/src/ggml-cpu/ops.cpp @3f545be): the
// sector is pair mod sum(sections); blocks: t for sector < s0, h below s0+s1, w below s0+s1+s2,
// else e; interleaved: h where sector % 3 == 1 and sector < 3 s1, w where sector % 3 == 2 and
// sector < 3 s2, t where sector % 3 == 0 and sector < 3 s0, else e.
int RopeSectionOfPair(const RopeParams& params, int64_t pair);

// Angle of pair i at position pos: theta_i = pos * freq_scale * freq_base^(-2i/n_rot) /
// freq_factors[i], as ggml_rope_ext with ext_factor = 0 and attn_factor = 1. Evaluated in double
// and rounded once, so it is accurate at any position; llama.cpp builds theta by an f32
// recurrence and differs from it by up to about pos * i * 2^-24 radians.
//
// Writes table [n_tokens, n_rot]: for token t, n_rot/2 cosines then n_rot/2 sines (the planar
// layout the rope kernel reads). Caller owns table. INVALID_ARGUMENT on bad params or a null
// buffer.
//
// positions: [n_tokens] for one-position RoPE; [n_tokens, 4] (t, h, w, e per token) when
// params.multi_section(), where every token may also give one position (positions_per_token 1:
// all four equal, which is exactly one-position RoPE: text tokens of an M-RoPE model).
Status BuildRopeTable(const RopeParams& params, const int32_t* positions, int64_t n_tokens,
                      float* table, int positions_per_token = 1);

// Rotates x [n_tokens, n_heads, head_dim] in place with a precomputed table [n_tokens, n_rot]
// (from BuildRopeTable, or a caller's own for multi-section / 2-D rope). token_stride: floats
// between tokens (0 = n_heads * head_dim; larger for a fused QKV buffer). Values past n_rot in
// each head are untouched. pool may be nullptr. INVALID_ARGUMENT on bad shapes.
Status RopeWithTable(const kernels::KernelTable& kt, ThreadPool* pool, float* x, int64_t n_tokens,
                     int64_t n_heads, int64_t head_dim, int64_t token_stride, const float* table,
                     int64_t n_rot, bool neox);

// Convenience: BuildRopeTable for `positions` [n_tokens] then RopeWithTable on a contiguous x.
// Allocates the n_tokens * n_rot table; to rotate Q and K with the same positions, build the
// table once and call RopeWithTable twice.
Status Rope(const kernels::KernelTable& kt, ThreadPool* pool, const RopeParams& params, float* x,
            int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions);

}  // namespace vlmd::engine::ops
