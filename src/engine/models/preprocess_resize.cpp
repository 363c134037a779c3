// Resampling of 8-bit RGB images (see preprocess_resize.h). The arithmetic (float vs double
// steps, truncation vs rounding) mirrors llama.cpp's so that resized pixels are bit-identical.
#include "engine/models/preprocess_resize.h"

#include <algorithm>
#include <cmath>

namespace vlmd::engine::models {
namespace {

int Clamp(int v, int lo, int hi) { return std::max(lo, std::min(v, hi)); }

RgbImage Blank(int32_t w, int32_t h) {
  RgbImage out;
  out.width = w;
  out.height = h;
  out.rgb.assign(static_cast<size_t>(w) * h * 3, 0);
  return out;
}

// Corner-aligned: output 0 samples source 0 and output tw - 1 samples source W - 1 (ratio
// (W - 1) / (tw - 1), 0 for a 1-pixel target); the right / bottom neighbour is clamped to the
// last pixel, and the float interpolation is truncated to u8, as llama.cpp's resize_bilinear.
RgbImage ResizeBilinear(RgbView src, int32_t tw, int32_t th) {
  RgbImage dst = Blank(tw, th);
  if (src.width < 1 || src.height < 1) return dst;  // nothing to sample: black
  const float x_ratio = tw > 1 ? static_cast<float>(src.width - 1) / static_cast<float>(tw - 1) : 0;
  const float y_ratio =
      th > 1 ? static_cast<float>(src.height - 1) / static_cast<float>(th - 1) : 0;
  auto at = [&](int y, int x, int c) {
    return static_cast<float>(src.rgb[3 * (static_cast<size_t>(y) * src.width + x) + c]);
  };
  // Written out as s + (e - s) * t in separate float steps (no fused multiply-add: the baseline
  // build has no FMA, and llama.cpp's preprocessing is compiled without it too).
  auto lerp = [](float s, float e, float t) {
    const volatile float scaled = (e - s) * t;
    return s + scaled;
  };
  for (int y = 0; y < th; ++y) {
    const float py = static_cast<float>(y) * y_ratio;
    const int y0 = std::min(static_cast<int>(py), src.height - 1);
    const int y1 = std::min(y0 + 1, src.height - 1);
    const float fy = py - static_cast<float>(y0);
    for (int x = 0; x < tw; ++x) {
      const float px = static_cast<float>(x) * x_ratio;
      const int x0 = std::min(static_cast<int>(px), src.width - 1);
      const int x1 = std::min(x0 + 1, src.width - 1);
      const float fx = px - static_cast<float>(x0);
      for (int c = 0; c < 3; ++c) {
        const float top = lerp(at(y0, x0, c), at(y0, x1, c), fx);
        const float bottom = lerp(at(y1, x0, c), at(y1, x1, c), fx);
        dst.rgb[3 * (static_cast<size_t>(y) * tw + x) + c] =
            static_cast<uint8_t>(lerp(top, bottom, fy));
      }
    }
  }
  return dst;
}

// One cubic segment through p[-1..2] evaluated at t in [0, 1): the coefficients are formed in
// double and stored as float, the polynomial is evaluated in float (llama.cpp's order).
float Cubic(float pm1, float p0, float p1, float p2, float t) {
  const float d0 = pm1 - p0, d2 = p1 - p0, d3 = p2 - p0;
  const float a1 = static_cast<float>(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
  const float a2 = static_cast<float>(1.0 / 2 * d0 + 1.0 / 2 * d2);
  const float a3 = static_cast<float>(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
  return p0 + a1 * t + a2 * t * t + a3 * t * t * t;
}

// Per output pixel: the horizontal cubic through 4 source pixels of each of 4 source rows, then
// the vertical cubic through those 4 values (llama.cpp's order, kept bit for bit). The horizontal
// results depend only on (source row, output column), so each is computed once per source row
// and kept while output rows still need it (4 rows in flight): an upscale by 3 evaluates about
// 2.3 cubics per output value instead of 5.
RgbImage ResizeBicubic(RgbView src, int32_t tw, int32_t th) {
  RgbImage dst = Blank(tw, th);
  const int nx = src.width, ny = src.height;
  const float sx = static_cast<float>(nx) / static_cast<float>(tw);
  const float sy = static_cast<float>(ny) / static_cast<float>(th);
  std::vector<int> col_x(static_cast<size_t>(tw));
  std::vector<float> col_dx(static_cast<size_t>(tw));
  for (int j = 0; j < tw; ++j) {
    col_x[j] = static_cast<int>(sx * j);
    col_dx[j] = sx * j - col_x[j];
  }
  // Horizontal pass of one (clamped) source row: [tw][3] values.
  auto horizontal = [&](int yy, float* out) {
    const uint8_t* row = src.rgb.data() + 3 * static_cast<size_t>(yy) * nx;
    auto at = [&](int x, int c) { return static_cast<float>(row[3 * Clamp(x, 0, nx - 1) + c]); };
    for (int j = 0; j < tw; ++j) {
      const int x = col_x[j];
      for (int c = 0; c < 3; ++c) {
        out[3 * j + c] = Cubic(at(x - 1, c), at(x, c), at(x + 1, c), at(x + 2, c), col_dx[j]);
      }
    }
  };
  constexpr int kSlots = 4;
  std::vector<float> slots(static_cast<size_t>(kSlots) * tw * 3);
  int slot_row[kSlots] = {-1, -1, -1, -1};
  auto row_values = [&](int yy) -> const float* {
    yy = Clamp(yy, 0, ny - 1);
    for (int s = 0; s < kSlots; ++s) {
      if (slot_row[s] == yy) return slots.data() + static_cast<size_t>(s) * tw * 3;
    }
    // Output rows move down the source: the lowest cached row is no longer needed.
    int victim = 0;
    for (int s = 1; s < kSlots; ++s) {
      if (slot_row[s] < slot_row[victim]) victim = s;
    }
    float* out = slots.data() + static_cast<size_t>(victim) * tw * 3;
    horizontal(yy, out);
    slot_row[victim] = yy;
    return out;
  };
  for (int i = 0; i < th; ++i) {
    const int y = static_cast<int>(sy * i);
    const float dy = sy * i - y;
    const float* r[4];
    for (int k = 0; k < 4; ++k) r[k] = row_values(y - 1 + k);
    for (int j = 0; j < tw; ++j) {
      for (int c = 0; c < 3; ++c) {
        const int at = 3 * j + c;
        const float v = Cubic(r[0][at], r[1][at], r[2][at], r[3][at], dy);
        dst.rgb[3 * (static_cast<size_t>(i) * tw + j) + c] =
            static_cast<uint8_t>(std::min(std::max(std::round(v), 0.0f), 255.0f));
      }
    }
  }
  return dst;
}

// Separable resampling with normalized filter weights in 22-bit fixed point.
constexpr int kPrecisionBits = 32 - 8 - 2;

double CubicPillow(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double Lanczos3(double x) {
  if (-3.0 <= x && x < 3.0) return Sinc(x) * Sinc(x / 3.0);
  return 0.0;
}

struct Taps {
  int ksize = 0;
  std::vector<int> bounds;    // [out][2]: first input index, count
  std::vector<int32_t> kk;    // [out][ksize] fixed-point weights
};

Taps ComputeTaps(int in_size, int out_size, ResizeAlgo algo) {
  const bool lanczos = algo == ResizeAlgo::kLanczos;
  const bool triangle = algo == ResizeAlgo::kBilinearPillow;
  const double support_base = lanczos ? 3.0 : (triangle ? 1.0 : 2.0);
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = support_base * filter_scale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.bounds.resize(2 * out_size);
  t.kk.assign(static_cast<size_t>(out_size) * t.ksize, 0);
  std::vector<double> w(t.ksize);
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const double inv = 1.0 / filter_scale;
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int n = hi - lo;
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      const double x = (i + lo - center + 0.5) * inv;
      w[i] = lanczos ? Lanczos3(x) : (triangle ? std::max(0.0, 1.0 - std::fabs(x)) : CubicPillow(x));
      sum += w[i];
    }
    for (int i = 0; i < n; ++i) {
      const double v = sum != 0.0 ? w[i] / sum : w[i];
      t.kk[static_cast<size_t>(o) * t.ksize + i] = static_cast<int32_t>(
          v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    t.bounds[2 * o] = lo;
    t.bounds[2 * o + 1] = n;
  }
  return t;
}

uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(std::min(std::max(v, 0), 255));
}

// Pass over x (horizontal) or y (vertical) from src into a w x h destination.
RgbImage ResamplePass(const RgbImage& src, int w, int h, bool horizontal, const Taps& t) {
  RgbImage dst = Blank(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int o = horizontal ? x : y;
      const int lo = t.bounds[2 * o], n = t.bounds[2 * o + 1];
      const int32_t* k = t.kk.data() + static_cast<size_t>(o) * t.ksize;
      for (int c = 0; c < 3; ++c) {
        int32_t acc = 1 << (kPrecisionBits - 1);
        for (int i = 0; i < n; ++i) {
          const int sx = horizontal ? lo + i : x, sy = horizontal ? y : lo + i;
          acc += static_cast<int32_t>(src.rgb[3 * (static_cast<size_t>(sy) * src.width + sx) + c]) *
                 k[i];
        }
        dst.rgb[3 * (static_cast<size_t>(y) * w + x) + c] = Clip8(acc);
      }
    }
  }
  return dst;
}

RgbImage ResizeSeparable(RgbView src, int32_t tw, int32_t th, ResizeAlgo algo) {
  RgbImage cur{src.width, src.height, std::vector<uint8_t>(src.rgb.begin(), src.rgb.end())};
  if (tw != src.width) {
    cur = ResamplePass(cur, tw, cur.height, true, ComputeTaps(src.width, tw, algo));
  }
  if (th != src.height) {
    cur = ResamplePass(cur, cur.width, th, false, ComputeTaps(src.height, th, algo));
  }
  return cur;
}

}  // namespace

RgbImage Resize(RgbView src, int32_t width, int32_t height, ResizeAlgo algo) {
  if (src.width == width && src.height == height) {
    return RgbImage{width, height, std::vector<uint8_t>(src.rgb.begin(), src.rgb.end())};
  }
  if (algo == ResizeAlgo::kBicubicPillow || algo == ResizeAlgo::kLanczos ||
      algo == ResizeAlgo::kBilinearPillow) {
    return ResizeSeparable(src, width, height, algo);
  }
  if (algo == ResizeAlgo::kBilinear) return ResizeBilinear(src, width, height);
  return ResizeBicubic(src, width, height);
}

RgbImage ResizeWithPadding(RgbView src, int32_t width, int32_t height, ResizeAlgo algo,
                           std::array<uint8_t, 3> pad) {
  if (src.width == width && src.height == height) return Resize(src, width, height, algo);
  const float scale = std::min(static_cast<float>(width) / src.width,
                               static_cast<float>(height) / src.height);
  const int32_t new_w =
      std::min(static_cast<int32_t>(std::ceil(src.width * scale)), width);
  const int32_t new_h =
      std::min(static_cast<int32_t>(std::ceil(src.height * scale)), height);
  const RgbImage resized = Resize(src, std::max(new_w, 1), std::max(new_h, 1), algo);
  RgbImage dst = Blank(width, height);
  for (size_t i = 0; i < dst.rgb.size(); i += 3) {
    dst.rgb[i] = pad[0];
    dst.rgb[i + 1] = pad[1];
    dst.rgb[i + 2] = pad[2];
  }
  const int ox = (width - resized.width) / 2, oy = (height - resized.height) / 2;
  for (int y = 0; y < resized.height; ++y) {
    std::copy_n(resized.rgb.data() + 3 * static_cast<size_t>(y) * resized.width,
                3 * resized.width,
                dst.rgb.data() + 3 * (static_cast<size_t>(y + oy) * width + ox));
  }
  return dst;
}

RgbImage Crop(RgbView src, int32_t x, int32_t y, int32_t w, int32_t h) {
  RgbImage dst = Blank(w, h);
  for (int r = 0; r < h; ++r) {
    std::copy_n(src.rgb.data() + 3 * (static_cast<size_t>(y + r) * src.width + x), 3 * w,
                dst.rgb.data() + 3 * static_cast<size_t>(r) * w);
  }
  return dst;
}

}  // namespace vlmd::engine::models
