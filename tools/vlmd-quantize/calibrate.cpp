// vlmd-quantize calibrate: runs image+prompt samples through the model (prefill only) and writes
// the importance matrix of its decoder matrices in llama.cpp's imatrix GGUF format.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "commands.h"
#include "common.h"
#include "engine/runtime/imatrix_collector.h"
#include "samples.h"

namespace vlmd::tools::quantize {

int RunCalibrate(int argc, char** argv) {
  CLI::App app{"Record the importance matrix of a model's decoder matrices (sum of x^2 per input "
               "column, llama.cpp's imatrix GGUF) from image+prompt samples.",
               "vlmd-quantize calibrate"};
  std::string model, mmproj, data, out;
  int32_t min_rows = 16;
  EngineFlags engine_flags;
  app.add_option("-m,--model", model, "text model GGUF")->required();
  app.add_option("--mmproj", mmproj, "vision encoder + projector GGUF (image samples need it)");
  app.add_option("--data", data,
                 "a folder of images with same-name .txt prompts, or a JSONL file of requests "
                 "(chat completion or invoke bodies)")->required();
  app.add_option("-o,--output", out, "imatrix GGUF to write")->required();
  app.add_option("--min-rows", min_rows,
                 "skip forward calls of fewer rows (llama-imatrix: 16)")->capture_default_str();
  AddEngineFlags(app, &engine_flags);
  CLI11_PARSE(app, argc, argv);

  auto samples = LoadSamples(data);
  if (!samples.ok()) return Fail(samples.status().ToString());
  auto engine = LoadEngine(engine_flags, model, mmproj);
  if (!engine.ok()) return Fail(engine.status().ToString());
  engine::runtime::ImatrixCollector collector(min_rows);
  int64_t rows = 0;
  for (const Sample& s : *samples) {
    auto prompt = SampleRows(**engine, s);
    if (!prompt.ok()) return Fail(s.name + ": " + prompt.status().ToString());
    (*engine)->set_matmul_observer(&collector);
    auto logits = (*engine)->PromptLogits(*prompt);
    (*engine)->set_matmul_observer(nullptr);
    if (!logits.ok()) return Fail(s.name + ": " + logits.status().ToString());
    rows += static_cast<int64_t>(prompt->tokens.size());
    std::printf("%-32s %6zu rows (%lld image rows)\n", s.name.c_str(), prompt->tokens.size(),
                static_cast<long long>(prompt->n_image_tokens));
  }
  engine::gguf::ImportanceMatrix& m = collector.matrix();
  if (m.entries.empty()) {
    return Fail("no forward call had --min-rows " + std::to_string(min_rows) +
                " rows: nothing recorded (longer samples, or a lower --min-rows)");
  }
  m.datasets = {data};
  m.chunk_count = static_cast<uint32_t>(samples->size());
  // llama-imatrix's chunks are all chunk_size tokens; ours are samples of any length: their
  // mean (the field is informational to both quantizers).
  m.chunk_size = static_cast<uint32_t>(rows / static_cast<int64_t>(samples->size()));
  const Status st = engine::gguf::WriteImatrixFile(m, out);
  if (!st.ok()) return Fail(st.ToString());
  std::printf("%zu samples, %lld rows; %zu matrices recorded (%lld of %lld observations skipped "
              "for fewer than %d rows) -> %s\n",
              samples->size(), static_cast<long long>(rows), m.entries.size(),
              static_cast<long long>(collector.skipped()),
              static_cast<long long>(collector.observations()), min_rows, out.c_str());
  return 0;
}

}  // namespace vlmd::tools::quantize
