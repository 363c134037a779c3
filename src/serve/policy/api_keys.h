// API keys: the set of client secrets the server accepts, each with an id (what logs and metrics
// show; the secret never leaves this class) and a per-key rate limit. Only SHA-256 digests of the
// secrets are kept in memory.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "core/status.h"

namespace vlmd::serve::policy {

// What a successful authentication yields. Deliberately has no field for the secret.
struct ApiKey {
  std::string id;
  double rate_per_s = 0;  // token-bucket refill rate; 0: unlimited
  double burst = 0;       // bucket capacity (requests that may arrive at once)
};

class ApiKeyStore {
 public:
  // JSON: {"keys": [{"id": "team-a", "key": "secret...", "rate_per_s": 5, "burst": 10},
  //                 {"id": "team-b", "key_sha256": "<64 hex>"}]}
  // Each entry has exactly one of "key" (plain, >= 16 characters) or "key_sha256" (digest of the
  // key, so the file need not hold secrets). Ids are unique and non-empty; two entries may not share
  // a secret; rate_per_s >= 0; burst >= 1 and defaults to max(1, rate_per_s); unknown fields are
  // errors (a misspelt "rate" must not silently mean unlimited). Errors are INVALID_ARGUMENT and name
  // the entry's id or index, NEVER key material (JSON syntax errors report only a byte offset).
  // LoadFile: NOT_FOUND when the file cannot be read. The caller owns the result.
  static Result<std::unique_ptr<ApiKeyStore>> LoadFile(const std::string& path);
  static Result<std::unique_ptr<ApiKeyStore>> FromJson(const nlohmann::json& doc);

  // Hashes `presented` with SHA-256 and compares the digest with EVERY stored digest using
  // CRYPTO_memcmp, without early exit, so the time taken does not depend on which key (if any)
  // matched or how much of it did. Returns the matching key (owned by the store, valid for its
  // lifetime) or nullptr. Thread-safe (the store is immutable after construction).
  const ApiKey* Authenticate(std::string_view presented) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    ApiKey key;
    Sha256Digest digest;
  };
  ApiKeyStore() = default;
  std::vector<Entry> entries_;
};

}  // namespace vlmd::serve::policy
