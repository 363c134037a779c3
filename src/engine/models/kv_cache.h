// Per-sequence key/value cache of a text decoder: for each layer, K and V rows of
// [n_kv_heads, head_dim] in F16 (llama.cpp's default cache type, and half the memory of f32).
// A layer keeps all n_ctx positions (row = position), or, for a sliding-window layer, a ring of
// fewer rows: position p in row p % rows (the window plus the rows one forward call may add).
// Owned by one sequence; not thread-safe (the scheduler thread owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vlmd::engine::models {

class KvCache {
 public:
  // layer_rows: per layer, the rows kept (empty, 0 or >= n_ctx: all n_ctx positions).
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t kv_dim, const std::vector<int32_t>& layer_rows = {});

  int32_t n_ctx() const { return n_ctx_; }
  int32_t kv_dim() const { return kv_dim_; }
  // Positions [0, n_filled) were written (a ring layer still holds the last rows(l) of them).
  int32_t n_filled() const { return n_filled_; }
  void set_n_filled(int32_t n) { n_filled_ = n; }
  // Forget everything from position `n` on (a cache with ring layers cannot be refilled from
  // there: TextDecoder::Forward refuses a restart below n_filled on it).
  void Truncate(int32_t n) {
    if (n < n_filled_) n_filled_ = n < 0 ? 0 : n;
  }
  // Rows of layer l, and where position p lives in them.
  int32_t rows(int32_t layer) const { return rows_[static_cast<size_t>(layer)]; }
  bool ring(int32_t layer) const { return rows(layer) < n_ctx_; }
  int32_t row_of(int32_t layer, int32_t pos) const { return ring(layer) ? pos % rows(layer) : pos; }
  // Whether CopyPrefixFrom(other, n) finds what it needs: in each layer the positions
  // [max(0, n - rows(l)), n), which a ring layer of `other` keeps only while no later position
  // overwrote them.
  bool CanCopyPrefix(const KvCache& other, int32_t n) const;
  // Copies those positions of `other` (same layer count and kv_dim; n <= n_ctx and
  // other.n_filled; CanCopyPrefix) and sets n_filled to n: a new sequence starting from
  // another's prompt prefix (prefix reuse).
  void CopyPrefixFrom(const KvCache& other, int32_t n);
  int32_t n_layers() const { return static_cast<int32_t>(k_.size()); }
  uint16_t* k(int32_t layer) { return k_[layer].data(); }  // F16 bits, [rows(layer), kv_dim]
  uint16_t* v(int32_t layer) { return v_[layer].data(); }
  size_t bytes() const;
  // Bytes a cache of n_ctx positions holds (K and V, F16) with layer_rows as the constructor's.
  static uint64_t BytesFor(int32_t n_layers, int32_t n_ctx, int32_t kv_dim,
                           const std::vector<int32_t>& layer_rows = {});

 private:
  int32_t n_ctx_;
  int32_t kv_dim_;
  int32_t n_filled_ = 0;
  std::vector<int32_t> rows_;
  std::vector<std::vector<uint16_t>> k_, v_;
};

}  // namespace vlmd::engine::models
