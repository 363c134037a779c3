// vlmd-quantize calibrate: runs image+prompt samples through the model (prefill only) and writes
// the importance matrix of its decoder matrices in llama.cpp's imatrix GGUF format.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "commands.h"
#include "engine/runtime/imatrix_collector.h"
#include "samples.h"

namespace vlmd::tools::quantize {

int RunCalibrate(int argc, char** argv) {
  CLI::App app{"Record the importance matrix of a model's decoder matrices (sum of x^2 per input "
               "column, llama.cpp's imatrix GGUF) from image+prompt samples.",
               "vlmd-quantize calibrate"};
  std::string model, mmproj, data, out;
  int32_t threads = 0, n_ctx = 8192, min_rows = 16;
  std::string precision = "exact";
  app.add_option("-m,--model", model, "text model GGUF")->required();
  app.add_option("--mmproj", mmproj, "vision encoder + projector GGUF (image samples need it)");
  app.add_option("--data", data,
                 "a folder of images with same-name .txt prompts, or a JSONL file of requests "
                 "(chat completion or invoke bodies)")->required();
  app.add_option("-o,--output", out, "imatrix GGUF to write")->required();
  app.add_option("-t,--threads", threads, "threads (0 = all cores)")->capture_default_str();
  app.add_option("-c,--ctx-size", n_ctx, "context positions per sample")->capture_default_str();
  app.add_option("--min-rows", min_rows,
                 "skip forward calls of fewer rows (llama-imatrix: 16)")->capture_default_str();
  app.add_option("--precision", precision, "exact or fast")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "vlmd-quantize: error: %s\n", what.c_str());
    return 2;
  };
  auto samples = LoadSamples(data);
  if (!samples.ok()) return fail(samples.status().ToString());
  engine::runtime::EngineOptions eo;
  eo.mmproj_path = mmproj;
  eo.threads = threads;
  eo.n_ctx = n_ctx;
  auto prec = engine::ops::ParsePrecision(precision);
  if (!prec) return fail("--precision: '" + precision + "' is not exact or fast");
  eo.precision = *prec;
  auto engine = engine::runtime::VlmEngine::Load(model, eo);
  if (!engine.ok()) return fail(engine.status().ToString());
  engine::runtime::ImatrixCollector collector(min_rows);
  int64_t rows = 0;
  for (const Sample& s : *samples) {
    auto prompt = SampleRows(**engine, s);
    if (!prompt.ok()) return fail(s.name + ": " + prompt.status().ToString());
    (*engine)->set_matmul_observer(&collector);
    auto logits = (*engine)->PromptLogits(*prompt);
    (*engine)->set_matmul_observer(nullptr);
    if (!logits.ok()) return fail(s.name + ": " + logits.status().ToString());
    rows += static_cast<int64_t>(prompt->tokens.size());
    std::printf("%-32s %6zu rows (%lld image rows)\n", s.name.c_str(), prompt->tokens.size(),
                static_cast<long long>(prompt->n_image_tokens));
  }
  engine::gguf::ImportanceMatrix& m = collector.matrix();
  if (m.entries.empty()) {
    return fail("no forward call had --min-rows " + std::to_string(min_rows) +
                " rows: nothing recorded (longer samples, or a lower --min-rows)");
  }
  m.datasets = {data};
  m.chunk_count = static_cast<uint32_t>(samples->size());
  m.chunk_size = static_cast<uint32_t>(n_ctx);
  const Status st = engine::gguf::WriteImatrixFile(m, out);
  if (!st.ok()) return fail(st.ToString());
  std::printf("%zu samples, %lld rows; %zu matrices recorded (%lld of %lld observations skipped "
              "for fewer than %d rows) -> %s\n",
              samples->size(), static_cast<long long>(rows), m.entries.size(),
              static_cast<long long>(collector.skipped()),
              static_cast<long long>(collector.observations()), min_rows, out.c_str());
  return 0;
}

}  // namespace vlmd::tools::quantize
