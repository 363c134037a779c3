// `vlmd-bench model` (see model_bench.h). Prefill: one 512-token prompt of random ids (as
// llama-bench's pp512); decode: 128 greedy tokens from a 1-token prompt (as tg128). Medians of
// `reps` runs. With --mmproj also the encode time of one square image (tiles as the model's
// preprocessing makes them) and its GFLOP/s against the f32 FMA peak measured in the same run.
#include "model_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "engine/image/image.h"
#include "engine/runtime/vlm_engine.h"
#include "engine/tensor/dtype.h"
#include "machine_limits.h"

namespace vlmd::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Multiply-adds x 2 of one encoder tile: patch embedding, per block the four attention
// projections, QK^T and PV over all positions, and the two FFN matrices (norms, softmax and
// activations are not counted). The projector is a few percent and is left out too.
double VitFlopsPerTile(const engine::models::VisionConfig& c) {
  const double pos = c.n_patches(), d = c.d_model, ff = c.d_ff;
  const double patch = 2.0 * pos * 3.0 * c.patch_size * c.patch_size * d;
  const double block = 2.0 * pos * (4.0 * d * d + 2.0 * d * ff) + 2.0 * 2.0 * pos * pos * d;
  return patch + c.n_layers * block;
}

// The same count for a Qwen VL image of width x height pixels (as preprocessed): every block
// over its patches, attention over the whole image in full-attention blocks and over a window
// (up to 16 merged tokens, 64 patches) in 2.5-VL's windowed ones; the merger's 4d x 4d product.
double QwenVitFlops(const engine::models::VisionConfig& c, int width, int height) {
  const double pos = (width / c.patch_size) * static_cast<double>(height / c.patch_size);
  const double d = c.d_model, ff = c.d_ff, win = std::min(pos, 64.0);
  const double ffn = c.ffn_act == engine::ops::Activation::kSilu ? 3.0 * d * ff : 2.0 * d * ff;
  double flops = 2.0 * 2.0 * pos * 3.0 * c.patch_size * c.patch_size * d;  // two kernels
  for (int l = 0; l < c.n_layers; ++l) {
    const bool windowed = c.n_wa_pattern > 0 && (l + 1) % c.n_wa_pattern != 0;
    flops += 2.0 * pos * (4.0 * d * d + ffn) + 2.0 * 2.0 * pos * (windowed ? win : pos) * d;
  }
  return flops + 2.0 * (pos / 4) * 16.0 * d * d;
}

// A deterministic test picture (gradients and a grid): the encoder's time does not depend on
// the content, the preprocessing only on the size.
engine::image::Image TestImage(int width, int height) {
  engine::image::Image img;
  img.width = width;
  img.height = height;
  const int side = std::max(width, height);
  img.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &img.rgb[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / side);
      p[1] = static_cast<uint8_t>(y * 255 / side);
      p[2] = static_cast<uint8_t>(((x / 32) + (y / 32)) % 2 ? 220 : 30);
    }
  }
  return img;
}

struct EncodeResult {
  int64_t tiles = 0;
  double ms_per_image = 0, ms_per_tile = 0, gflops = 0;
};

Status MeasureEncode(engine::runtime::VlmEngine& e, int width, int height, int reps,
                     EncodeResult* r) {
  engine::runtime::ImageTimings t;
  VLMD_ASSIGN_OR_RETURN(auto prepared, e.PreprocessDecoded(TestImage(width, height), 0, &t));
  std::vector<double> ms;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first run warms up and is dropped
    engine::runtime::ImageTimings ti;
    VLMD_ASSIGN_OR_RETURN(auto encoded, e.EncodePrepared(prepared, &ti));
    if (rep > 0) ms.push_back(ti.encode_ms);
  }
  r->tiles = prepared.tiles.n_tiles;
  r->ms_per_image = Median(ms);
  r->ms_per_tile = r->ms_per_image / static_cast<double>(r->tiles);
  const engine::models::VisionConfig& c = e.vision()->config();
  const double flops = engine::models::IsQwenVl(c.projector)
                           ? QwenVitFlops(c, prepared.tiles.width, prepared.tiles.height)
                           : VitFlopsPerTile(c) * static_cast<double>(r->tiles);
  r->gflops = flops / (r->ms_per_image / 1e3) / 1e9;
  return Status::Ok();
}

}  // namespace

int RunModelBench(const ModelBenchOptions& opts) {
  const int image_height = opts.image_height > 0 ? opts.image_height : opts.image_side;
  nlohmann::json all = nlohmann::json::array();
  for (int threads : opts.threads) {
    engine::runtime::EngineOptions eo;
    eo.threads = threads;
    eo.precision = engine::ops::ParsePrecision(opts.precision).value_or(engine::ops::Precision::kFast);
    eo.n_ctx = opts.prompt_tokens + opts.gen_tokens + 8;
    eo.mmproj_path = opts.mmproj_path;
    auto engine = engine::runtime::VlmEngine::Load(opts.model_path, eo);
    if (!engine.ok()) {
      std::fprintf(stderr, "vlmd-bench: error: %s\n", engine.status().ToString().c_str());
      return 2;
    }
    auto& e = **engine;
    const auto& cfg = e.model().config();
    std::mt19937 rng(42);
    std::vector<int32_t> prompt(opts.prompt_tokens);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % e.tokenizer().n_tokens());

    // Each run's decode is compared with a bandwidth probe taken right after it: this VM's
    // bandwidth drifts by up to ~10% between minutes, and one probe before or after all runs
    // could land in a slower or faster minute than the decode it bounds (a 1-thread f16 run
    // once read 1.08 "of the bound"). The reported ratio is the median of the per-run ratios.
    std::vector<double> prefill, decode, bandwidth, ratios;
    for (int rep = 0; rep < opts.reps; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      auto logits = e.PromptLogits(prompt);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!logits.ok()) {
        std::fprintf(stderr, "vlmd-bench: error: %s\n", logits.status().ToString().c_str());
        return 1;
      }
      prefill.push_back(opts.prompt_tokens / (ms / 1e3));
      engine::runtime::GenerateParams gp;
      gp.max_tokens = opts.gen_tokens;
      gp.ignore_eos = true;
      auto gen = e.Generate(std::span<const int32_t>(prompt.data(), 1), gp);
      if (!gen.ok()) {
        std::fprintf(stderr, "vlmd-bench: error: %s\n", gen.status().ToString().c_str());
        return 1;
      }
      // Generate runs max_tokens - 1 decode forwards (the first token comes from the prefill).
      decode.push_back((opts.gen_tokens - 1) / (gen->decode_ms / 1e3));
      const double run_bw = MeasureReadBandwidth(e.pool(), e.model().weight_bytes());
      if (run_bw <= 0) {
        std::fprintf(stderr, "vlmd-bench: cannot allocate the bandwidth probe's buffer\n");
        return 1;
      }
      bandwidth.push_back(run_bw);
      const double run_bound = run_bw * 1e9 / static_cast<double>(e.model().weight_bytes());
      ratios.push_back(decode.back() / run_bound);
    }
    const double bw = Median(bandwidth);
    const double bound = bw * 1e9 / static_cast<double>(e.model().weight_bytes());
    const double pp = Median(prefill), tg = Median(decode), ratio = Median(ratios);
    nlohmann::json j = {{"model", opts.model_path},
                        {"threads", threads},
                        {"precision", opts.precision},
                        {"kernel_isa", std::string(e.isa_name())},
                        {"n_layers", cfg.n_layers},
                        {"d_model", cfg.d_model},
                        {"weight_bytes", e.model().weight_bytes()},
                        {"prefill_tokens", opts.prompt_tokens},
                        {"prefill_tok_s", pp},
                        {"decode_tokens", opts.gen_tokens},
                        {"decode_tok_s", tg},
                        {"bandwidth_gb_s", bw},
                        {"decode_bound_tok_s", bound},
                        {"decode_ratio_to_bound", ratio}};
    EncodeResult enc;
    double peak = 0;
    if (!opts.mmproj_path.empty()) {
      if (Status s = MeasureEncode(e, opts.image_side, image_height, opts.reps, &enc); !s.ok()) {
        std::fprintf(stderr, "vlmd-bench: error: %s\n", s.ToString().c_str());
        return 1;
      }
      peak = MeasureFmaPeak(e.pool(), ProbeUnitFor(e.isa()));
      j["image_width"] = opts.image_side;
      j["image_height"] = image_height;
      j["image_tiles"] = enc.tiles;
      j["encode_ms_per_image"] = enc.ms_per_image;
      j["encode_ms_per_tile"] = enc.ms_per_tile;
      j["encode_gflop_s"] = enc.gflops;
      j["fma_peak_gflop_s"] = peak;
      j["encode_ratio_to_peak"] = enc.gflops / peak;
    }
    all.push_back(j);
    if (!opts.json) {
      std::printf("%s | %d thread(s) | kernels %s | weights %.1f MiB\n", opts.model_path.c_str(),
                  threads, std::string(e.isa_name()).c_str(), e.model().weight_bytes() / 1048576.0);
      std::printf("  prefill pp%d: %8.1f tok/s\n", opts.prompt_tokens, pp);
      // The ratio is the median of the per-run ratios (each run against its own probe), so it
      // need not equal the median tok/s over the median bound printed beside it.
      std::printf("  decode  tg%d: %8.1f tok/s   bound %.1f tok/s (%.1f GB/s / %.1f MB per token)"
                  "   ratio %.2f\n",
                  opts.gen_tokens, tg, bound, bw, e.model().weight_bytes() / 1e6, ratio);
      if (!opts.mmproj_path.empty()) {
        std::printf("  encode %dx%d image: %lld tiles, %.1f ms per image, %.1f ms per tile, "
                    "%.1f GFLOP/s = %.2f of the f32 FMA peak (%.1f GFLOP/s)\n",
                    opts.image_side, image_height, static_cast<long long>(enc.tiles),
                    enc.ms_per_image, enc.ms_per_tile, enc.gflops, enc.gflops / peak, peak);
      }
    }
  }
  if (opts.json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
  return 0;
}

}  // namespace vlmd::bench
