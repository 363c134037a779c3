// ImageCache: byte-bounded LRU of encoded images (see image_cache.h).
#include "serve/hosting/image_cache.h"

namespace vlmd::serve {

uint64_t ImageCache::EntryBytes(const engine::runtime::EncodedImage& e) {
  return e.embeddings.size() * sizeof(float) + sizeof(e);
}

ImageCache::Entry ImageCache::Lookup(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

void ImageCache::Insert(const std::string& key, Entry value) {
  if (!value) return;
  const uint64_t b = EntryBytes(*value) + key.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (b > capacity_) return;
  lru_.push_front(Node{key, std::move(value), b});
  index_[key] = lru_.begin();
  bytes_ += b;
  EvictLocked();
}

void ImageCache::EvictLocked() {
  while (bytes_ > capacity_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

uint64_t ImageCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ImageCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace vlmd::serve
