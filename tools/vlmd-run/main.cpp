// vlmd-run: command-line front end of the engine. Flag parsing and dispatch only; each command
// lives in its own file (info.cpp, generate.cpp).
#include <CLI/CLI.hpp>
#include <iostream>

#include "core/thread_pool.h"
#include "vlmd-run/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"vlmd-run: run a model once (generate, tokenize) or inspect a GGUF file"};
  vlmd::tools::RunOptions opts;
  app.add_option("--info", opts.info_path,
                 "Print the header, metadata and tensor table of a GGUF file as JSON")
      ->type_name("FILE.gguf");
  app.add_option("-m,--model", opts.model_path, "Text model GGUF")->type_name("FILE.gguf");
  app.add_option("--mmproj", opts.mmproj_path, "Vision encoder + projector GGUF")
      ->type_name("FILE.gguf");
  app.add_option("--model-key-file", opts.model_key.file,
                 "key of sealed model files (32 hex digits; else env VLMD_MODEL_KEY)");
  app.add_option("--model-key-command", opts.model_key.command,
                 "command printing that key (run by /bin/sh with VLMD_KEY_ID set)");
  app.add_option("--image", opts.images,
                 "Image file (JPEG, PNG, WebP, BMP, PPM); repeatable, one <__media__> per image "
                 "in the prompt (without markers the images open the user's turn; with --raw-prompt they go first)");
  app.add_option("--dump-image-embeddings", opts.dump_image_embeddings_path,
                 "Write the f32 embeddings [n_image_tokens, n_embd] of the first image");
  app.add_option("-p,--prompt", opts.prompt, "Prompt text (the user message)");
  app.add_option("-f,--prompt-file", opts.prompt_file, "Read the prompt from a file");
  app.add_option("-n,--n-predict", opts.n_predict, "Tokens to generate")->capture_default_str();
  app.add_option("--temp", opts.temperature, "Temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-k", opts.top_k, "Top-k (0 = off)")->capture_default_str();
  app.add_option("--top-p", opts.top_p, "Top-p (1 = off)")->capture_default_str();
  app.add_option("--min-p", opts.min_p, "Min-p (0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", opts.repeat_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str();
  app.add_option("--seed", opts.seed, "Sampling seed")->capture_default_str();
  app.add_option("--stop", opts.stop, "Stop string (repeatable)");
  app.add_option("-t,--threads", opts.threads, "Threads (0 = all cores)")
      ->check(CLI::Range(0, vlmd::kMaxThreads))
      ->capture_default_str();
  app.add_option("-c,--ctx", opts.n_ctx, "Context positions")->capture_default_str();
  app.add_option("--precision", opts.precision,
                 "exact: the parity reference; fast: float weights as int8 blocks too")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
  app.add_flag("--raw-prompt", opts.raw_prompt,
               "Use the prompt as is: no chat template, special-token text parsed");
  app.add_flag("--ignore-eos", opts.ignore_eos, "Keep generating past end-of-generation tokens");
  app.add_flag("--json", opts.json, "Print one JSON object (text, tokens, timings)");
  app.add_option("--dump-logits", opts.dump_logits_path,
                 "Write the f32 logits of the last prompt position (little-endian)");
  auto* tok = app.add_option("--tokenize", opts.tokenize_text, "Print the token ids of TEXT");
  auto* tok_file = app.add_option("--tokenize-file", opts.tokenize_file,
                                  "Print the token ids of a file's contents");
  app.add_flag("--add-special", opts.add_special,
               "With --tokenize: add BOS/EOS as the vocabulary says and parse special tokens");
  app.add_option("--redact", opts.redact,
                 "Cover faces and/or number plates in the --image files first: faces | plates | faces,plates");
  app.add_option("--redact-style", opts.redact_style, "blur | pixelate | fill")->capture_default_str();
  app.add_option("--face-detector", opts.face_detector, "hog (dlib) | haar (OpenCV)")->capture_default_str();
  app.add_option("--save-redacted", opts.save_redacted, "Write the first covered image (PNG)")
      ->type_name("OUT.png");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!opts.info_path.empty()) return vlmd::tools::RunInfo(opts.info_path, opts.model_key, std::cout, std::cerr);
  if (!opts.model_path.empty() && (tok->count() > 0 || tok_file->count() > 0)) {
    return vlmd::tools::RunTokenize(opts, std::cout, std::cerr);
  }
  if (opts.model_path.empty() && !opts.redact.empty()) return vlmd::tools::RunRedact(opts, std::cout, std::cerr);
  if (!opts.model_path.empty() && (!opts.prompt.empty() || !opts.prompt_file.empty())) {
    return vlmd::tools::RunGenerate(opts, std::cout, std::cerr);
  }
  if (!opts.model_path.empty()) {
    std::cerr << "vlmd-run: error: -m needs -p/-f (generate) or --tokenize/--tokenize-file\n";
    return vlmd::tools::kExitError;
  }
  std::cerr << app.help();
  return vlmd::tools::kExitError;
}
