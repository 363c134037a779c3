// Per-sequence key/value cache of a text decoder: for each layer, K and V rows indexed by
// position, [n_ctx, n_kv_heads, head_dim] in F16 (llama.cpp's default cache type, and half the
// memory of f32). Owned by one sequence; not thread-safe (the scheduler thread owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vlmd::engine::models {

class KvCache {
 public:
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t kv_dim);

  int32_t n_ctx() const { return n_ctx_; }
  int32_t kv_dim() const { return kv_dim_; }
  // Positions [0, n_filled) hold valid K/V.
  int32_t n_filled() const { return n_filled_; }
  void set_n_filled(int32_t n) { n_filled_ = n; }
  // Forget everything from position `n` on (prefix reuse keeps the first n positions).
  void Truncate(int32_t n) {
    if (n < n_filled_) n_filled_ = n < 0 ? 0 : n;
  }
  // Copies positions [0, n) of `other` (same layer count and kv_dim; n <= both n_ctx) and sets
  // n_filled to n: a new sequence starting from another's prompt prefix (prefix reuse).
  void CopyPrefixFrom(const KvCache& other, int32_t n);
  int32_t n_layers() const { return static_cast<int32_t>(k_.size()); }
  uint16_t* k(int32_t layer) { return k_[layer].data(); }  // F16 bits, [n_ctx, kv_dim]
  uint16_t* v(int32_t layer) { return v_[layer].data(); }
  size_t bytes() const;
  // Bytes a cache of n_ctx positions holds (K and V, F16): what NewCache(n_ctx) allocates.
  static uint64_t BytesFor(int32_t n_layers, int32_t n_ctx, int32_t kv_dim) {
    return uint64_t{2} * static_cast<uint64_t>(n_layers) * static_cast<uint64_t>(n_ctx) *
           static_cast<uint64_t>(kv_dim) * sizeof(uint16_t);
  }

 private:
  int32_t n_ctx_;
  int32_t kv_dim_;
  int32_t n_filled_ = 0;
  std::vector<std::vector<uint16_t>> k_, v_;
};

}  // namespace vlmd::engine::models
