// vlmd-bench: benchmarks that print ratios against limits measured in the same run.
// Subcommands: `kernels` (matmul paths vs memory bandwidth and FMA peak), `model` (prefill and
// decode speed of a text model vs the decode bandwidth bound), `serve` (throughput and latency of a
// running vlmd under concurrent /v1/vlm/invoke requests, optionally beside slow and idle
// connections), `seal` (sealed-model load time), `redact` (redaction's detectors).
#include <CLI/CLI.hpp>

#include "core/thread_pool.h"
#include "kernels_bench.h"
#include "model_bench.h"
#include "redact_bench.h"
#include "seal_bench.h"
#include "serve_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"vlmd benchmarks (ratios against limits measured in the same run)"};
  app.require_subcommand(1);
  vlmd::bench::KernelsBenchOptions kopts;
  CLI::App* kernels = app.add_subcommand("kernels", "matmul paths vs bandwidth and FMA peak");
  kernels->add_option("-t,--threads", kopts.threads, "thread counts to run (default: 1 2)")
      ->check(CLI::Range(1, vlmd::kMaxThreads));
  kernels->add_flag("--quick", kopts.quick, "fewer shapes and repetitions");
  kernels->add_option("--json", kopts.json_path, "also write JSON to this file ('-' = stdout)");
  vlmd::bench::ModelBenchOptions mopts;
  CLI::App* model = app.add_subcommand("model", "prefill / decode tokens/s of a text model; image encode time with --mmproj");
  model->add_option("-m,--model", mopts.model_path, "text model GGUF")->required();
  model->add_option("--mmproj", mopts.mmproj_path, "vision GGUF: also measure image encoding");
  model->add_option("--image-size", mopts.image_side, "side of the square test image (pixels)")
      ->check(CLI::Range(1, 16384))
      ->capture_default_str();
  model->add_option("--image-height", mopts.image_height,
                    "height of the test image (default: square); --image-size is then its width")
      ->check(CLI::Range(1, 16384));
  model->add_option("-t,--threads", mopts.threads, "thread counts to run (default: 1 2)")
      ->check(CLI::Range(0, vlmd::kMaxThreads));
  model->add_option("-p,--prompt-tokens", mopts.prompt_tokens, "prefill length")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  // Decode speed counts the steps after the first token (the first comes from the prefill).
  model->add_option("-n,--gen-tokens", mopts.gen_tokens, "decode length")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  model->add_option("-r,--reps", mopts.reps, "repetitions (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  model->add_flag("--json", mopts.json, "print JSON");
  model->add_option("--precision", mopts.precision, "exact | fast (float weights as int8 blocks)")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
  vlmd::bench::ServeBenchOptions sopts;
  vlmd::bench::SealBenchOptions seal_opts;
  CLI::App* seal = app.add_subcommand("seal", "load time of sealed (SM4) model files against the plain ones");
  seal->add_option("-m,--model", seal_opts.model_path, "text model GGUF")->required();
  seal->add_option("--mmproj", seal_opts.mmproj_path, "vision GGUF");
  seal->add_option("-t,--threads", seal_opts.threads, "thread counts to run (default: 1 2)")
      ->check(CLI::Range(1, vlmd::kMaxThreads));
  seal->add_option("-r,--reps", seal_opts.reps, "repetitions (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  seal->add_option("--scratch", seal_opts.scratch_dir, "folder for the sealed copies (default: the temp folder)");
  vlmd::bench::RedactBenchOptions ropts;
  CLI::App* redact = app.add_subcommand("redact", "redaction's face detectors (dlib HOG vs OpenCV Haar) and plate cascade");
  redact->add_option("--lfw", ropts.lfw_path, "scikit-image's lfw_subset.npy (recall and false positives)");
  redact->add_option("--scale", ropts.scales, "LFW crops enlarged to 25 x SCALE pixels (default: 2 4)");
  redact->add_option("--image", ropts.images, "photos to time detection on (repeatable)");
  redact->add_option("-r,--reps", ropts.reps, "repetitions (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  CLI::App* serve = app.add_subcommand("serve", "images/s and latency of a running vlmd server");
  serve->add_option("--url", sopts.url, "server base URL, e.g. http://127.0.0.1:8080")->required();
  serve->add_option("-c,--concurrency", sopts.concurrency, "client threads")->capture_default_str();
  serve->add_option("-n,--requests", sopts.requests, "requests in total")->capture_default_str();
  serve->add_option("--image", sopts.image_path, "image sent with each request")->required();
  serve->add_option("-p,--prompt", sopts.prompt, "prompt")->capture_default_str();
  serve->add_option("--max-tokens", sopts.max_tokens, "tokens generated per request")->capture_default_str();
  serve->add_flag("--distinct-images", sopts.distinct_images,
                  "a different image per request (the --image pixels, re-encoded with the request "
                  "index in the low bits of the first pixels): no embedding-cache hits");
  serve->add_option("--api-key", sopts.api_key, "Authorization: Bearer KEY (or env VLMD_API_KEY)")
      ->envname("VLMD_API_KEY");
  serve->add_option("--timeout", sopts.timeout_s, "per-request timeout, seconds")->capture_default_str();
  serve->add_flag("--json", sopts.json, "print JSON");
  serve->add_option("--slow-clients", sopts.slow_clients,
                    "also measure while this many clients trickle a request head (1 byte/s)")
      ->check(CLI::Range(0, 50000));
  serve->add_option("--idle-clients", sopts.idle_clients,
                    "also measure while this many connections stay idle")
      ->check(CLI::Range(0, 50000));
  serve->add_option("--hostile-warmup", sopts.hostile_warmup_s,
                    "seconds the hostile connections are held before the loaded run")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (seal->parsed()) return vlmd::bench::RunSealBench(seal_opts);
  if (redact->parsed()) return vlmd::bench::RunRedactBench(ropts);
  if (kernels->parsed()) return vlmd::bench::RunKernelsBench(kopts);
  if (model->parsed()) return vlmd::bench::RunModelBench(mopts);
  if (serve->parsed()) return vlmd::bench::RunServeBench(sopts);
  return 0;
}
