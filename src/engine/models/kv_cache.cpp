// KvCache storage (see kv_cache.h).
#include "engine/models/kv_cache.h"

namespace vlmd::engine::models {

KvCache::KvCache(int32_t n_layers, int32_t n_ctx, int32_t kv_dim)
    : n_ctx_(n_ctx), kv_dim_(kv_dim), k_(n_layers), v_(n_layers) {
  const size_t n = static_cast<size_t>(n_ctx) * static_cast<size_t>(kv_dim);
  for (auto& k : k_) k.assign(n, 0);
  for (auto& v : v_) v.assign(n, 0);
}

size_t KvCache::bytes() const {
  return k_.size() * 2 * static_cast<size_t>(n_ctx_) * static_cast<size_t>(kv_dim_) * 2;
}

}  // namespace vlmd::engine::models
