// vlmd-quantize eval: how far a quantized model's next-token distributions are from a reference
// model's (mean KL divergence, top-1 agreement, logit NMSE) on held-out image+prompt samples.
// Compared rows: every prompt row whose next row is text, and the last row (the first answer
// token); an image's inner rows predict embeddings, not tokens.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "engine/runtime/logit_comparison.h"
#include "samples.h"

namespace vlmd::tools::quantize {
namespace {

using engine::runtime::PromptRows;
using engine::runtime::VlmEngine;

// Reference logits held at once per sample (larger samples are compared in windows of rows).
constexpr size_t kWindowBytes = size_t{256} << 20;

bool Compared(const PromptRows& p, int64_t row) {
  return row + 1 == static_cast<int64_t>(p.tokens.size()) || p.tokens[static_cast<size_t>(row + 1)] >= 0;
}

}  // namespace

int RunEval(int argc, char** argv) {
  CLI::App app{"Compare a quantized model's next-token distributions with a reference model's on "
               "held-out image+prompt samples: mean KL(ref || test), top-1 agreement, logit NMSE.",
               "vlmd-quantize eval"};
  std::string ref_path, test_path, mmproj, ref_mmproj, test_mmproj, data;
  EngineFlags engine_flags;
  app.add_option("--ref", ref_path, "reference text model GGUF (e.g. F16)")->required();
  app.add_option("--test", test_path, "quantized text model GGUF")->required();
  app.add_option("--mmproj", mmproj, "vision GGUF for both models");
  app.add_option("--ref-mmproj", ref_mmproj, "vision GGUF of the reference (overrides --mmproj)");
  app.add_option("--test-mmproj", test_mmproj, "vision GGUF of the test model (overrides --mmproj)");
  app.add_option("--data", data, "held-out samples: a folder or a JSONL file (as calibrate)")->required();
  AddEngineFlags(app, &engine_flags);  // for both models
  CLI11_PARSE(app, argc, argv);

  auto samples = LoadSamples(data);
  if (!samples.ok()) return Fail(samples.status().ToString());
  auto ref = LoadEngine(engine_flags, ref_path, ref_mmproj.empty() ? mmproj : ref_mmproj);
  if (!ref.ok()) return Fail("--ref: " + ref.status().ToString());
  auto test = LoadEngine(engine_flags, test_path, test_mmproj.empty() ? mmproj : test_mmproj);
  if (!test.ok()) return Fail("--test: " + test.status().ToString());
  if ((*ref)->model().config().n_vocab != (*test)->model().config().n_vocab) {
    return Fail("the models' vocabularies differ (" + std::to_string((*ref)->model().config().n_vocab) +
                " and " + std::to_string((*test)->model().config().n_vocab) + " tokens)");
  }
  const size_t n_vocab = static_cast<size_t>((*ref)->model().config().n_vocab);

  engine::runtime::LogitComparison total;
  for (const Sample& s : *samples) {
    auto ref_rows = SampleRows(**ref, s);
    if (!ref_rows.ok()) return Fail(s.name + ": " + ref_rows.status().ToString());
    auto test_rows = SampleRows(**test, s);
    if (!test_rows.ok()) return Fail(s.name + ": " + test_rows.status().ToString());
    if (ref_rows->tokens != test_rows->tokens) {
      return Fail(s.name + ": the models make different prompts of it (another tokenizer or "
                  "vision family?)");
    }
    // The reference's compared rows first, then the test model's against them; a sample with
    // more compared rows than kWindowBytes of reference logits holds goes in windows (each one
    // prefills the sample again).
    std::vector<int64_t> compared;
    for (int64_t r = 0; r < static_cast<int64_t>(ref_rows->tokens.size()); ++r) {
      if (Compared(*ref_rows, r)) compared.push_back(r);
    }
    const size_t window = std::max<size_t>(1, kWindowBytes / (sizeof(float) * n_vocab));
    engine::runtime::LogitComparison sample;
    for (size_t w0 = 0; w0 < compared.size(); w0 += window) {
      const size_t w1 = std::min(compared.size(), w0 + window);
      const auto in_window = [&](int64_t row) {
        return row >= compared[w0] && row <= compared[w1 - 1] && Compared(*ref_rows, row);
      };
      std::vector<float> ref_logits;
      Status st = (*ref)->PromptRowLogits(*ref_rows, in_window, [&](int64_t, std::span<const float> l) {
        ref_logits.insert(ref_logits.end(), l.begin(), l.end());
        return Status::Ok();
      });
      if (!st.ok()) return Fail(s.name + ": --ref: " + st.ToString());
      size_t next = 0;
      st = (*test)->PromptRowLogits(*test_rows, in_window, [&](int64_t, std::span<const float> l) {
        const std::span<const float> r(ref_logits.data() + next * n_vocab, n_vocab);
        ++next;
        VLMD_RETURN_IF_ERROR(sample.Add(r, l));
        return total.Add(r, l);
      });
      if (!st.ok()) return Fail(s.name + ": --test: " + st.ToString());
    }
    std::printf("%-32s %5lld rows  KL %.6f  top-1 %.4f  NMSE %.3e\n", s.name.c_str(),
                static_cast<long long>(sample.rows()), sample.mean_kl(), sample.top1_agreement(),
                sample.nmse());
  }
  std::printf("%zu samples, %lld rows: mean KL %.6f (max %.6f), top-1 agreement %.4f, logit NMSE "
              "%.4e\n",
              samples->size(), static_cast<long long>(total.rows()), total.mean_kl(), total.max_kl(),
              total.top1_agreement(), total.nmse());
  return 0;
}

}  // namespace vlmd::tools::quantize
