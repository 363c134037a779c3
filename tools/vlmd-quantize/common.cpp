#include "common.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/thread_pool.h"

namespace vlmd::tools::quantize {

int Fail(const std::string& what) {
  std::fprintf(stderr, "vlmd-quantize: error: %s\n", what.c_str());
  return 2;
}

void AddEngineFlags(CLI::App& app, EngineFlags* flags) {
  app.add_option("-t,--threads", flags->threads, "threads (0 = all cores)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  app.add_option("-c,--ctx-size", flags->n_ctx, "context positions per sample")->capture_default_str();
  app.add_option("--precision", flags->precision, "exact or fast")->capture_default_str();
}

Result<std::unique_ptr<engine::runtime::VlmEngine>> LoadEngine(const EngineFlags& flags,
                                                               const std::string& model,
                                                               const std::string& mmproj) {
  const auto precision = engine::ops::ParsePrecision(flags.precision);
  if (!precision) {
    return InvalidArgumentError("--precision: '" + flags.precision + "' is not exact or fast");
  }
  engine::runtime::EngineOptions eo;
  eo.mmproj_path = mmproj;
  eo.threads = flags.threads;
  eo.n_ctx = flags.n_ctx;
  eo.precision = *precision;
  return engine::runtime::VlmEngine::Load(model, eo);
}

}  // namespace vlmd::tools::quantize
