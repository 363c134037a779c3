// Per-API-key rate limits: one token bucket per key id (refill `rate_per_s` tokens a second up to
// `burst`; each request takes one). A refused request maps to HTTP 429 with Retry-After.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace vlmd::serve::policy {

class RateLimiter {
 public:
  struct Decision {
    bool allowed;
    double retry_after_s;  // when refused: seconds until one token is back; 0 when allowed
  };

  // Takes one token from `key_id`'s bucket at time `now` (injectable for tests). rate_per_s <= 0:
  // always allowed, no bucket kept. A key seen for the first time starts with a full bucket of
  // `burst` tokens (burst below 1 is treated as 1, else the key could never pass). When a key's
  // limits change (key file reloaded) the bucket keeps its tokens, capped at the new burst. Times
  // earlier than the bucket's last update do not refill it. Thread-safe (one mutex). Memory grows
  // with the number of distinct key ids, which the key store bounds.
  Decision Take(const std::string& key_id, double rate_per_s, double burst,
                std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point last;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;  // guarded by mu_
};

}  // namespace vlmd::serve::policy
