// KvCache storage (see kv_cache.h).
#include "engine/models/kv_cache.h"

#include <algorithm>

#include "core/check.h"

namespace vlmd::engine::models {
namespace {

int32_t LayerRows(int32_t n_ctx, const std::vector<int32_t>& layer_rows, size_t l) {
  const int32_t r = l < layer_rows.size() ? layer_rows[l] : 0;
  return r > 0 && r < n_ctx ? r : n_ctx;
}

}  // namespace

KvCache::KvCache(int32_t n_layers, int32_t n_ctx, int32_t kv_dim, const std::vector<int32_t>& layer_rows)
    : n_ctx_(n_ctx), kv_dim_(kv_dim), k_(n_layers), v_(n_layers) {
  for (size_t l = 0; l < k_.size(); ++l) {
    rows_.push_back(LayerRows(n_ctx, layer_rows, l));
    const size_t n = static_cast<size_t>(rows_.back()) * static_cast<size_t>(kv_dim);
    k_[l].assign(n, 0);
    v_[l].assign(n, 0);
  }
}

bool KvCache::CanCopyPrefix(const KvCache& other, int32_t n) const {
  if (other.kv_dim_ != kv_dim_ || other.k_.size() != k_.size() || n < 0 || n > n_ctx_ ||
      n > other.n_filled_) {
    return false;
  }
  for (int32_t l = 0; l < n_layers(); ++l) {
    const int32_t lo = std::max(0, n - rows(l));
    // other's ring keeps positions [n_filled - rows, n_filled).
    if (other.ring(l) && lo < other.n_filled_ - other.rows(l)) return false;
  }
  return true;
}

void KvCache::CopyPrefixFrom(const KvCache& other, int32_t n) {
  VLMD_CHECK(CanCopyPrefix(other, n));
  const size_t row = static_cast<size_t>(kv_dim_);
  for (int32_t l = 0; l < n_layers(); ++l) {
    for (int32_t p = std::max(0, n - rows(l)); p < n; ++p) {
      const size_t from = static_cast<size_t>(other.row_of(l, p)) * row, to = static_cast<size_t>(row_of(l, p)) * row;
      std::copy_n(other.k_[l].data() + from, row, k_[l].data() + to);
      std::copy_n(other.v_[l].data() + from, row, v_[l].data() + to);
    }
  }
  n_filled_ = n;
}

size_t KvCache::bytes() const {
  uint64_t b = 0;
  for (int32_t r : rows_) b += uint64_t{2} * static_cast<uint64_t>(r) * static_cast<uint64_t>(kv_dim_) * sizeof(uint16_t);
  return static_cast<size_t>(b);
}

uint64_t KvCache::BytesFor(int32_t n_layers, int32_t n_ctx, int32_t kv_dim,
                           const std::vector<int32_t>& layer_rows) {
  uint64_t b = 0;
  for (int32_t l = 0; l < n_layers; ++l) {
    b += uint64_t{2} * static_cast<uint64_t>(LayerRows(n_ctx, layer_rows, static_cast<size_t>(l))) *
         static_cast<uint64_t>(kv_dim) * sizeof(uint16_t);
  }
  return b;
}

}  // namespace vlmd::engine::models
