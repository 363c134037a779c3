// The visual-embedding cache (SPEC S5): encoder outputs keyed by the image's pixel hash plus the
// preprocessing parameters (PreparedImage::key), bounded in bytes. Each entry has an owner (the
// client key's tenant; "" for all when keys are off): over the bound, the least recently used
// entry of the owner holding the most bytes goes first, so that one client filling the cache
// evicts its own entries before anyone else's (with one owner: least recently used first).
// Thread-safe; entries are shared, immutable, and stay alive while a job still uses them.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/runtime/multimodal_prompt.h"

namespace vlmd::serve {

class ImageCache {
 public:
  using Entry = std::shared_ptr<const engine::runtime::EncodedImage>;

  explicit ImageCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The entry for `key` (now most recently used), or nullptr.
  Entry Lookup(const std::string& key);
  // Inserts or replaces (as `owner`'s); evicts until the total fits (the heaviest owner's least
  // recently used entries first). An entry larger than the whole capacity is not kept.
  void Insert(const std::string& key, Entry value, const std::string& owner = "");

  uint64_t bytes() const;
  size_t size() const;
  static uint64_t EntryBytes(const engine::runtime::EncodedImage& e);

 private:
  struct Node {
    std::string key;
    Entry value;
    uint64_t bytes;
    std::string owner;
  };
  void EvictLocked();
  void EraseLocked(std::list<Node>::iterator it);

  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::list<Node> lru_;  // front = most recently used
  std::unordered_map<std::string, std::list<Node>::iterator> index_;
  uint64_t bytes_ = 0;
  std::unordered_map<std::string, uint64_t> owner_bytes_;  // owners with entries
};

}  // namespace vlmd::serve
