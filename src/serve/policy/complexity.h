// Input-complexity score for tier routing (SPEC P5): how "hard" a request looks, from the image's
// edge density and the prompt's token entropy, in [0, 1]. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace vlmd::serve::policy {

// Fraction of pixels on an edge: Sobel gradient magnitude of the luma (0..1 scale, magnitude
// divided by 4, the largest |Gx| a 0..1 image can give) above `edge_threshold`. Images larger than
// 256 px on a side are sampled on a stride grid first (the score is a statistic, and routing must
// cost far less than encoding). `rgb` is width*height*3 bytes. 0 for images under 3x3.
double EdgeDensity(int32_t width, int32_t height, std::span<const uint8_t> rgb,
                   double edge_threshold = 0.1);

// Shannon entropy (bits) of the token-id frequency distribution of `tokens`, divided by
// `saturation_bits` and clipped to [0, 1]: a prompt of 2^8 equally frequent distinct tokens
// scores 1 with the default. 0 for an empty prompt.
double TokenEntropyScore(std::span<const int32_t> tokens, double saturation_bits = 8.0);

struct ComplexityWeights {
  double image = 0.5;
  double text = 0.5;
};

// Weighted mean of the parts present: without an image the score is the text part alone.
double ComplexityScore(std::optional<double> edge_density, double token_entropy_score,
                       const ComplexityWeights& weights = {});

enum class Tier { kLight, kBalanced, kRobust };
const char* TierName(Tier tier);

// score < light_below -> light; score < robust_from -> balanced; else robust (defaults 0.3 / 0.7).
struct TierThresholds {
  double light_below = 0.3;
  double robust_from = 0.7;
};
Tier PickTier(double score, const TierThresholds& thresholds = {});

}  // namespace vlmd::serve::policy
