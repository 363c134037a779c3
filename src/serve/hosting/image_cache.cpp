// ImageCache: byte-bounded LRU of encoded images (see image_cache.h).
#include "serve/hosting/image_cache.h"

#include <algorithm>
#include <iterator>

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

void ImageCache::Insert(const std::string& key, Entry value, const std::string& owner) {
  if (!value) return;
  const uint64_t b = EntryBytes(*value) + key.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  if (b > capacity_) return;
  lru_.push_front(Node{key, std::move(value), b, owner});
  index_[key] = lru_.begin();
  bytes_ += b;
  owner_bytes_[owner] += b;
  EvictLocked();
}

void ImageCache::EraseLocked(std::list<Node>::iterator it) {
  bytes_ -= it->bytes;
  if (auto o = owner_bytes_.find(it->owner); o != owner_bytes_.end() && (o->second -= it->bytes) == 0) {
    owner_bytes_.erase(o);
  }
  index_.erase(it->key);
  lru_.erase(it);
}

void ImageCache::EvictLocked() {
  while (bytes_ > capacity_ && lru_.size() > 1) {
    uint64_t heaviest = 0;
    for (const auto& [owner, b] : owner_bytes_) heaviest = std::max(heaviest, b);
    // From the least recently used end, the first entry of an owner holding the most (of two
    // owners holding as much, the one whose entry is older), never the entry just inserted (the
    // front): when that is its owner's only one, the least recently used entry goes.
    auto victim = std::prev(lru_.end());
    for (auto it = victim; it != lru_.begin(); --it) {
      if (owner_bytes_.at(it->owner) == heaviest) {
        victim = it;
        break;
      }
    }
    EraseLocked(victim);
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
