// ggml's symmetric level fit (see quant_fit.h).
#include "engine/tensor/quant_fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__clang__)
#pragma clang fp contract(off)  // see quantize_legacy.cpp
#endif

namespace vlmd::engine::quant {

float FitSymmetricLevels(const float* x, int n, int nmax, int8_t* L, const float* qw) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  // Accumulates sum(w x l) and sum(w l^2) of the grid with inverse scale `iscale`.
  auto fit = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float lf = static_cast<float>(std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      const float w = qw != nullptr ? qw[i] : x[i] * x[i];
      *sumlx += w * x[i] * lf;
      *suml2 += w * lf * lf;
    }
  };
  auto store = [&](float iscale) {
    for (int i = 0; i < n; ++i) {
      L[i] = static_cast<int8_t>(nmax + std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
    }
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx, suml2;
  fit(iscale, &sumlx, &suml2);
  store(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    fit(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      store(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace vlmd::engine::quant
