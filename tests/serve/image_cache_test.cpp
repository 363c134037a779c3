// The visual-embedding cache (serve/hosting/image_cache.h): bounded in bytes, least recently used
// first within an owner, and the owner holding the most evicted first.
#include "serve/hosting/image_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace vlmd::serve {
namespace {

ImageCache::Entry Embeddings(size_t floats) {
  auto e = std::make_shared<engine::runtime::EncodedImage>();
  e->embeddings.assign(floats, 0.25f);
  return e;
}

TEST(ImageCache, OneOwnerEvictsTheLeastRecentlyUsed) {
  const uint64_t entry = ImageCache::EntryBytes(*Embeddings(100)) + 2;  // a two-character key
  ImageCache cache(3 * entry);
  cache.Insert("k1", Embeddings(100));
  cache.Insert("k2", Embeddings(100));
  cache.Insert("k3", Embeddings(100));
  ASSERT_NE(cache.Lookup("k1"), nullptr);  // k2 is now the least recently used
  cache.Insert("k4", Embeddings(100));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.Lookup("k2"), nullptr);
  EXPECT_NE(cache.Lookup("k1"), nullptr);
  EXPECT_EQ(cache.bytes(), 3 * entry);
  cache.Insert("k5", Embeddings(100000));  // larger than the whole cache: not kept, nothing evicted
  EXPECT_EQ(cache.size(), 3u);
}

// One client filling the cache evicts its own entries, not another's older ones (plain LRU did).
TEST(ImageCache, TheOwnerHoldingTheMostIsEvictedFirst) {
  const uint64_t entry = ImageCache::EntryBytes(*Embeddings(100)) + 2;
  ImageCache cache(4 * entry);
  cache.Insert("b1", Embeddings(100), "b");  // the oldest entry
  for (int i = 0; i < 8; ++i) {
    std::string key = "a";  // (appended: GCC 12 warns on "a" + std::to_string(i), -Wrestrict)
    cache.Insert(key.append(std::to_string(i)), Embeddings(100), "a");
  }
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_NE(cache.Lookup("b1"), nullptr) << "another owner's entry was evicted";
  EXPECT_EQ(cache.Lookup("a4"), nullptr);
  EXPECT_NE(cache.Lookup("a7"), nullptr);
  // With as much each, the older goes; the entry just inserted stays even when its owner holds
  // the most by it alone.
  ImageCache two(2 * entry);
  two.Insert("x1", Embeddings(100), "x");
  two.Insert("y1", Embeddings(100), "y");
  const uint64_t big = ImageCache::EntryBytes(*Embeddings(150)) + 2;
  ASSERT_LE(big + entry, 2 * entry + entry);
  two.Insert("z1", Embeddings(150), "z");
  EXPECT_NE(two.Lookup("z1"), nullptr);
  EXPECT_LE(two.bytes(), 2 * entry);
}

}  // namespace
}  // namespace vlmd::serve
