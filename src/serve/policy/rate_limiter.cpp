// Token-bucket rate limiter keyed by API key id.
#include "serve/policy/rate_limiter.h"

#include <algorithm>

namespace vlmd::serve::policy {
namespace {
// Refill arithmetic in double seconds is not exact (3/s for 333333333 ns is 0.999999999 tokens);
// this slack keeps "one token after 1/rate seconds" true without letting anything real through.
constexpr double kTokenSlack = 1e-6;
}  // namespace

RateLimiter::Decision RateLimiter::Take(const std::string& key_id, double rate_per_s, double burst,
                                        std::chrono::steady_clock::time_point now) {
  if (!(rate_per_s > 0)) return {true, 0.0};
  burst = std::max(burst, 1.0);
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = buckets_.try_emplace(key_id, Bucket{burst, now});
  Bucket& b = it->second;
  if (!inserted && now > b.last) {
    const double elapsed_s = std::chrono::duration<double>(now - b.last).count();
    b.tokens += elapsed_s * rate_per_s;
    b.last = now;
  }
  b.tokens = std::min(b.tokens, burst);
  if (b.tokens >= 1.0 - kTokenSlack) {
    b.tokens = std::max(0.0, b.tokens - 1.0);
    return {true, 0.0};
  }
  return {false, (1.0 - b.tokens) / rate_per_s};
}

}  // namespace vlmd::serve::policy
