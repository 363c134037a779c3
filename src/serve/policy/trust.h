// Trust signals of one reply (SPEC P8): how sure the model was of the tokens it chose.
// Pure functions, thread-safe.
#pragma once

#include <span>

namespace vlmd::serve::policy {

struct TrustSignals {
  double mean_entropy_bits = 0;  // mean over generated tokens of the model's entropy (T = 1)
  double min_token_prob = 1;     // lowest probability the model gave a token it emitted
  bool flagged = false;          // mean_entropy_bits > threshold
};

// `entropy_bits[i]` and `logprobs[i]` (natural log) describe generated token i. With no tokens the
// signals are the neutral {0, 1, false}. `flag_entropy_bits` <= 0 disables the flag.
TrustSignals ComputeTrust(std::span<const float> entropy_bits, std::span<const float> logprobs,
                          double flag_entropy_bits);

}  // namespace vlmd::serve::policy
