// JPEG decoding at the DCT scale the model needs (DecodeLimits::accept_reduced) against the full
// decode of the same file in the same run: a 4000x3000 photo-like image (smooth gradients with
// grain, quality 90), the full decode as the baseline, then the 1/2, 1/4 and 1/8 scales that
// Qwen VL (~1288x966), a 1024-px model and LLaVA-1.5 (336) would take. Counters: decoded MB (the
// RGB the decode holds) and megapixels of the file per second.
//   vlmd_bench_image_decode --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "engine/image/image.h"
#include "image/test_encoders.h"

namespace vlmd::engine::image {
namespace {

constexpr int kWidth = 4000, kHeight = 3000;

const testing::Bytes& Photo() {
  static const testing::Bytes jpeg = [] {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> grain(-6, 6);
    testing::Bytes rgb(size_t(kWidth) * kHeight * 3);
    for (int y = 0; y < kHeight; ++y) {
      for (int x = 0; x < kWidth; ++x) {
        const double u = double(x) / kWidth, v = double(y) / kHeight;
        const int base[3] = {int(200 * u + 30 * std::sin(9 * v)), int(160 * v + 40 * std::cos(7 * u)),
                             int(120 + 60 * std::sin(5 * (u + v)))};
        for (int c = 0; c < 3; ++c) {
          rgb[(size_t(y) * kWidth + x) * 3 + c] = uint8_t(std::clamp(base[c] + grain(rng), 0, 255));
        }
      }
    }
    return testing::EncodeJpeg(rgb, kWidth, kHeight, 3, 90);
  }();
  return jpeg;
}

// need_w x need_h: what the caller needs (0: the full decode, no hint).
void BM_DecodeJpeg(benchmark::State& state) {
  const int need_w = int(state.range(0)), need_h = int(state.range(1));
  DecodeLimits limits;
  if (need_w > 0) {
    limits.accept_reduced = [&](ImageSize, ImageSize reduced) {
      return reduced.width >= need_w && reduced.height >= need_h;
    };
  }
  const testing::Bytes& jpeg = Photo();
  int64_t decoded_bytes = 0;
  for (auto _ : state) {
    Result<Image> img = DecodeImage(jpeg, limits);
    if (!img.ok()) {
      state.SkipWithError(img.status().ToString().c_str());
      return;
    }
    decoded_bytes = int64_t(img->rgb.size());
    benchmark::DoNotOptimize(img->rgb.data());
  }
  state.counters["decoded_MB"] = double(decoded_bytes) / (1 << 20);
  state.counters["file_Mpx_per_s"] =
      benchmark::Counter(double(kWidth) * kHeight / 1e6, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeJpeg)
    ->ArgNames({"need_w", "need_h"})
    ->Args({0, 0})        // full size: the baseline
    ->Args({1288, 966})   // 1/2
    ->Args({1000, 750})   // 1/4
    ->Args({336, 336})    // 1/8
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vlmd::engine::image

BENCHMARK_MAIN();
