// Edge density (Sobel), token entropy and the tier thresholds of complexity routing.
#include "serve/policy/complexity.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

namespace vlmd::serve::policy {

double EdgeDensity(int32_t width, int32_t height, std::span<const uint8_t> rgb,
                   double edge_threshold) {
  if (width < 3 || height < 3 || rgb.size() < size_t(width) * size_t(height) * 3) return 0.0;
  // Luma of a stride-sampled grid of at most ~256x256 points (nearest sample, no filtering: the
  // edges the model will see survive as strong local gradients either way).
  const int32_t stride = std::max<int32_t>(1, std::max(width, height) / 256);
  const int32_t w = (width + stride - 1) / stride, h = (height + stride - 1) / stride;
  if (w < 3 || h < 3) return 0.0;
  std::vector<float> luma(size_t(w) * h);  // [h, w], 0..1
  for (int32_t y = 0; y < h; ++y) {
    for (int32_t x = 0; x < w; ++x) {
      const uint8_t* p = &rgb[(size_t(y) * stride * width + size_t(x) * stride) * 3];
      luma[size_t(y) * w + x] = (0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2]) / 255.0f;
    }
  }
  int64_t edges = 0;
  const double t2 = edge_threshold * edge_threshold * 16.0;  // compare squared, before the /4
  for (int32_t y = 1; y + 1 < h; ++y) {
    const float* a = &luma[size_t(y - 1) * w];
    const float* b = &luma[size_t(y) * w];
    const float* c = &luma[size_t(y + 1) * w];
    for (int32_t x = 1; x + 1 < w; ++x) {
      const double gx = (a[x + 1] + 2 * b[x + 1] + c[x + 1]) - (a[x - 1] + 2 * b[x - 1] + c[x - 1]);
      const double gy = (c[x - 1] + 2 * c[x] + c[x + 1]) - (a[x - 1] + 2 * a[x] + a[x + 1]);
      edges += (gx * gx + gy * gy) > t2;
    }
  }
  return double(edges) / (double(w - 2) * double(h - 2));
}

double TokenEntropyScore(std::span<const int32_t> tokens, double saturation_bits) {
  if (tokens.empty() || saturation_bits <= 0) return 0.0;
  std::unordered_map<int32_t, int64_t> counts;
  for (int32_t t : tokens) ++counts[t];
  const double n = double(tokens.size());
  double bits = 0;
  for (const auto& [id, c] : counts) {
    const double p = double(c) / n;
    bits -= p * std::log2(p);
  }
  return std::clamp(bits / saturation_bits, 0.0, 1.0);
}

double ComplexityScore(std::optional<double> edge_density, double token_entropy_score,
                       const ComplexityWeights& weights) {
  double sum = weights.text * token_entropy_score, total = weights.text;
  if (edge_density) {
    sum += weights.image * *edge_density;
    total += weights.image;
  }
  return total > 0 ? std::clamp(sum / total, 0.0, 1.0) : 0.0;
}

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kLight: return "light";
    case Tier::kBalanced: return "balanced";
    case Tier::kRobust: return "robust";
  }
  return "balanced";
}

Tier PickTier(double score, const TierThresholds& thresholds) {
  if (score < thresholds.light_below) return Tier::kLight;
  if (score < thresholds.robust_from) return Tier::kBalanced;
  return Tier::kRobust;
}

}  // namespace vlmd::serve::policy
