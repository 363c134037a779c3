// KvCache storage (see kv_cache.h).
#include "engine/models/kv_cache.h"

#include <algorithm>

#include "core/check.h"

namespace vlmd::engine::models {

KvCache::KvCache(int32_t n_layers, int32_t n_ctx, int32_t kv_dim)
    : n_ctx_(n_ctx), kv_dim_(kv_dim), k_(n_layers), v_(n_layers) {
  const size_t n = static_cast<size_t>(n_ctx) * static_cast<size_t>(kv_dim);
  for (auto& k : k_) k.assign(n, 0);
  for (auto& v : v_) v.assign(n, 0);
}

void KvCache::CopyPrefixFrom(const KvCache& other, int32_t n) {
  VLMD_CHECK(other.kv_dim_ == kv_dim_ && other.k_.size() == k_.size());
  VLMD_CHECK(n >= 0 && n <= n_ctx_ && n <= other.n_filled_);
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(kv_dim_);
  for (size_t l = 0; l < k_.size(); ++l) {
    std::copy_n(other.k_[l].data(), count, k_[l].data());
    std::copy_n(other.v_[l].data(), count, v_[l].data());
  }
  n_filled_ = n;
}

size_t KvCache::bytes() const {
  return static_cast<size_t>(BytesFor(n_layers(), n_ctx_, kv_dim_));
}

}  // namespace vlmd::engine::models
