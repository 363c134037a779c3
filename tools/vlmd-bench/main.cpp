// vlmd-bench: benchmarks that print ratios against limits measured in the same run.
// Subcommands: `kernels` (matmul paths vs memory bandwidth and FMA peak), `model` (prefill and
// decode speed of a text model vs the decode bandwidth bound).
#include <CLI/CLI.hpp>

#include "kernels_bench.h"
#include "model_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"vlmd benchmarks (ratios against limits measured in the same run)"};
  app.require_subcommand(1);
  vlmd::bench::KernelsBenchOptions kopts;
  CLI::App* kernels = app.add_subcommand("kernels", "matmul paths vs bandwidth and FMA peak");
  kernels->add_option("-t,--threads", kopts.threads, "thread counts to run (default: 1 2)");
  kernels->add_flag("--quick", kopts.quick, "fewer shapes and repetitions");
  kernels->add_option("--json", kopts.json_path, "also write JSON to this file ('-' = stdout)");
  vlmd::bench::ModelBenchOptions mopts;
  CLI::App* model = app.add_subcommand("model", "prefill / decode tokens/s of a text model");
  model->add_option("-m,--model", mopts.model_path, "text model GGUF")->required();
  model->add_option("-t,--threads", mopts.threads, "thread counts to run (default: 1 2)");
  model->add_option("-p,--prompt-tokens", mopts.prompt_tokens, "prefill length")->capture_default_str();
  model->add_option("-n,--gen-tokens", mopts.gen_tokens, "decode length")->capture_default_str();
  model->add_option("-r,--reps", mopts.reps, "repetitions (median)")->capture_default_str();
  model->add_flag("--json", mopts.json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  if (kernels->parsed()) return vlmd::bench::RunKernelsBench(kopts);
  if (model->parsed()) return vlmd::bench::RunModelBench(mopts);
  return 0;
}
