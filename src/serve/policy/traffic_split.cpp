// Sticky weighted pick: hash -> bucket -> cumulative weights.
#include "serve/policy/traffic_split.h"

#include <string>

#include "core/sha256.h"

namespace vlmd::serve::policy {

double StickyBucket(std::string_view route, std::string_view client_key) {
  std::string msg;
  msg.reserve(route.size() + 1 + client_key.size());
  msg.append(route).push_back('\n');
  msg.append(client_key);
  const Sha256Digest d =
      Sha256Of({reinterpret_cast<const uint8_t*>(msg.data()), msg.size()});
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d[i];
  return double(v >> 11) * 0x1.0p-53;  // top 53 bits: exact in a double, < 1
}

int PickWeighted(std::span<const double> weights, double bucket) {
  double total = 0;
  for (double w : weights) total += w > 0 ? w : 0;
  if (total <= 0) return -1;
  const double target = bucket * total;
  double acc = 0;
  int last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    acc += weights[i];
    last = int(i);
    if (target < acc) return int(i);
  }
  return last;  // rounding at the top end
}

}  // namespace vlmd::serve::policy
