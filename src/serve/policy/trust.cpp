// Trust signals: mean entropy and the weakest chosen token.
#include "serve/policy/trust.h"

#include <algorithm>
#include <cmath>

namespace vlmd::serve::policy {

TrustSignals ComputeTrust(std::span<const float> entropy_bits, std::span<const float> logprobs,
                          double flag_entropy_bits) {
  TrustSignals t;
  if (!entropy_bits.empty()) {
    double sum = 0;
    for (float e : entropy_bits) sum += e;
    t.mean_entropy_bits = sum / double(entropy_bits.size());
  }
  for (float lp : logprobs) t.min_token_prob = std::min(t.min_token_prob, std::exp(double(lp)));
  t.flagged = flag_entropy_bits > 0 && t.mean_entropy_bits > flag_entropy_bits;
  return t;
}

}  // namespace vlmd::serve::policy
