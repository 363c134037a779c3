// `vlmd-bench model` (see model_bench.h). Prefill: one 512-token prompt of random ids (as
// llama-bench's pp512); decode: 128 greedy tokens from a 1-token prompt (as tg128). Medians of
// `reps` runs.
#include "model_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "engine/runtime/text_engine.h"
#include "engine/tensor/dtype.h"
#include "machine_limits.h"

namespace vlmd::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int RunModelBench(const ModelBenchOptions& opts) {
  nlohmann::json all = nlohmann::json::array();
  for (int threads : opts.threads) {
    engine::runtime::EngineOptions eo;
    eo.threads = threads;
    eo.n_ctx = opts.prompt_tokens + opts.gen_tokens + 8;
    auto engine = engine::runtime::TextEngine::Load(opts.model_path, eo);
    if (!engine.ok()) {
      std::fprintf(stderr, "vlmd-bench: error: %s\n", engine.status().ToString().c_str());
      return 2;
    }
    auto& e = **engine;
    const auto& cfg = e.model().config();
    std::mt19937 rng(42);
    std::vector<int32_t> prompt(opts.prompt_tokens);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % e.tokenizer().n_tokens());

    std::vector<double> prefill, decode;
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
    }
    const double bw = MeasureReadBandwidth(e.pool(), e.model().weight_bytes());
    const double bound = bw * 1e9 / static_cast<double>(e.model().weight_bytes());
    const double pp = Median(prefill), tg = Median(decode);
    nlohmann::json j = {{"model", opts.model_path},
                        {"threads", threads},
                        {"precision", "exact"},
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
                        {"decode_ratio_to_bound", tg / bound}};
    all.push_back(j);
    if (!opts.json) {
      std::printf("%s | %d thread(s) | kernels %s | weights %.1f MiB\n", opts.model_path.c_str(),
                  threads, std::string(e.isa_name()).c_str(), e.model().weight_bytes() / 1048576.0);
      std::printf("  prefill pp%d: %8.1f tok/s\n", opts.prompt_tokens, pp);
      std::printf("  decode  tg%d: %8.1f tok/s   bound %.1f tok/s (%.1f GB/s / %.1f MB per token)"
                  "   ratio %.2f\n",
                  opts.gen_tokens, tg, bound, bw, e.model().weight_bytes() / 1e6, tg / bound);
    }
  }
  if (opts.json) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
  return 0;
}

}  // namespace vlmd::bench
