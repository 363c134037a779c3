// vlmd-quantize IN OUT TYPE: re-quantizes the weight matrices of a GGUF model and prints each
// tensor's relative error ||W - Wq|| / ||W||. Or a VLM's two files at once with their own types
// (--text q4_k --vision f16: the usual "INT4 text, FP16 vision"). --imatrix weighs the text
// matrices by an importance matrix (as llama-quantize --imatrix), --tensor-type overrides the
// type of the weights whose names match a pattern.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "commands.h"
#include "core/thread_pool.h"
#include "common.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/imatrix.h"
#include "engine/gguf/quantize_model.h"
#include "engine/tensor/quantize.h"

namespace vlmd::tools::quantize {
namespace {

using engine::DTypeName;
namespace gguf = engine::gguf;

std::string Shape(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? " x " : "") + std::to_string(s[i]);
  return out;
}

// Quantizes one file and prints its report (naming `shown`, the file's final name, or `out`);
// the exit code.
int QuantizeFile(const std::string& in, const std::string& out, const gguf::QuantizeOptions& opts,
                 ThreadPool* pool, bool quiet, const std::string& shown = "") {
  auto report = gguf::QuantizeModel(in, out, opts, pool);
  if (!report.ok()) return Fail(in + ": " + report.status().ToString());
  int n_quantized = 0, n_fallback = 0, n_weighted = 0;
  for (const auto& t : report->tensors) {
    if (t.quantized) ++n_quantized;
    if (t.fell_back) ++n_fallback;
    if (t.weighted) ++n_weighted;
    if (quiet) continue;
    if (t.quantized) {
      std::printf("%-40s %-18s %5s -> %-5s rel_err %.3e%s%s\n", t.name.c_str(),
                  Shape(t.shape).c_str(), std::string(DTypeName(t.from)).c_str(),
                  std::string(DTypeName(t.to)).c_str(), t.rel_error, t.weighted ? "  (imatrix)" : "",
                  t.fell_back ? "  (fallback: row length does not fit the block)" : "");
    } else {
      std::printf("%-40s %-18s %5s    kept\n", t.name.c_str(), Shape(t.shape).c_str(),
                  std::string(DTypeName(t.from)).c_str());
    }
  }
  if (!report->awq_groups.empty()) {
    double plain = 0.0, scaled = 0.0;
    int changed = 0;  // alpha 0: scales of 1, the group is as it was
    for (const auto& g : report->awq_groups) {
      plain += g.error_plain;
      scaled += g.error_scaled;
      changed += g.alpha > 0.0f;
      if (!quiet) {
        std::printf("AWQ %-36s alpha %.2f  weighted error %.3e -> %.3e\n", g.producer.c_str(),
                    g.alpha, g.error_plain, g.error_scaled);
      }
    }
    std::printf("AWQ: %d of %zu matrix groups scaled; their weighted quantization error %.3e -> "
                "%.3e (%.1f%% less)\n", changed, report->awq_groups.size(), plain, scaled,
                plain > 0 ? 100.0 * (1.0 - scaled / plain) : 0.0);
  } else if (opts.awq) {
    std::fprintf(stderr, "vlmd-quantize: warning: --awq found no matrix group to scale in %s\n",
                 in.c_str());
  }
  std::printf("%s: %d tensors quantized (%d with a fallback type), %zu kept; %.2f MiB -> %.2f MiB\n",
              (shown.empty() ? out : shown).c_str(), n_quantized, n_fallback,
              report->tensors.size() - n_quantized,
              report->bytes_in / 1048576.0, report->bytes_out / 1048576.0);
  if (opts.imatrix) {
    std::printf("%d of them weighted by the importance matrix (%zu entries)\n", n_weighted,
                opts.imatrix->entries.size());
    int n_copied_with_entry = 0;  // already of their type: copied, not re-quantized
    for (const auto& t : report->tensors) {
      n_copied_with_entry += !t.quantized && opts.imatrix->entries.count(t.name) > 0;
    }
    if (n_copied_with_entry > 0) {
      std::fprintf(stderr, "vlmd-quantize: warning: %d matrices with an importance-matrix entry "
                   "were already of their type and were copied, not re-quantized (quantize from "
                   "the F16 / F32 file to use the importance matrix)\n", n_copied_with_entry);
    } else if (n_weighted == 0 && engine::QuantizeUsesImportance(opts.type)) {
      std::fprintf(stderr, "vlmd-quantize: warning: no matrix of %s has an entry in the "
                   "importance matrix (made for another model?)\n", in.c_str());
    }
  }
  return 0;
}

// The --text/--vision form's files where they belong: swapped, the vision encoder was written as
// text.gguf and the text model as mmproj.gguf, and vlmd refused the folder only at load.
// Empty when `path` fits its role (or cannot be opened: QuantizeModel then says why).
std::string RoleMismatch(const std::string& path, bool vision) {
  auto f = gguf::GgufFile::Open(path);
  if (!f.ok()) return "";
  auto arch = (*f)->GetString("general.architecture");
  const std::string name = arch.ok() ? std::string(*arch) : "none";
  const bool clip = name == "clip";
  if (vision && !clip) {
    return "--mmproj " + path + " is not a vision encoder (general.architecture '" + name + "', not 'clip')";
  }
  if (!vision && clip) return "-m " + path + " is a vision encoder (general.architecture 'clip'); give it as --mmproj";
  return "";
}

}  // namespace

int RunQuantize(int argc, char** argv) {
  CLI::App app{"Quantize the weight matrices of a GGUF model: vlmd-quantize IN OUT TYPE, or a "
               "VLM's two files with --text TYPE --vision TYPE -m TEXT --mmproj MMPROJ -o DIR.\n"
               "Other commands: vlmd-quantize calibrate (importance matrix from image+prompt "
               "samples), vlmd-quantize eval (KL divergence to a reference); each has --help."};
  std::string in_path, out_path, type_name;
  std::string text_type, vision_type, model, mmproj, out_dir;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  bool quiet = false;
  std::string imatrix_path, awq_path;
  std::vector<std::string> override_texts, vision_override_texts;
  app.add_option("input", in_path, "input GGUF");
  app.add_option("output", out_path, "output GGUF");
  app.add_option("type", type_name, "q8_0 q4_0 q4_1 q5_0 q4_k q5_k q6_k f16 bf16 f32");
  app.add_option("--text", text_type, "the text model's type (with -m, --mmproj, -o)");
  app.add_option("--vision", vision_type, "the vision encoder's type (with -m, --mmproj, -o)");
  app.add_option("-m,--model", model, "text model GGUF (with --text)");
  app.add_option("--mmproj", mmproj, "vision GGUF (with --vision)");
  app.add_option("-o,--out-dir", out_dir, "folder for text.gguf and mmproj.gguf (with --text)");
  app.add_option("-t,--threads", threads, "threads")->check(CLI::Range(0, kMaxThreads))->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "print only the summary");
  app.add_option("--imatrix", imatrix_path,
                 "importance matrix (llama.cpp's GGUF or legacy .dat imatrix, or vlmd-quantize "
                 "calibrate's): weighs the text model's q4_0, q4_k, q5_k and q6_k matrices by it");
  app.add_option("--awq", awq_path,
                 "activation statistics (an imatrix file) for AWQ: per-channel scales searched "
                 "for each norm -> q/k/v, norm -> gate/up and up -> down group of the text model "
                 "and folded into the norm weights and up rows (an exact rewrite, no op added)");
  float awq_alpha = -1.0f;
  auto* alpha_option = app.add_option("--awq-alpha", awq_alpha,
                 "with --awq: scales = activation^alpha with this alpha for every group instead "
                 "of searching the best per group")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--tensor-type", override_texts,
                 "PATTERN=TYPE: weights whose name matches the regex get TYPE (repeatable; the "
                 "first match wins), e.g. token_embd=q8_0 or 'blk\\.[0-3]\\.ffn_down=q6_k'; in the "
                 "--text/--vision form, the text model's");
  app.add_option("--vision-tensor-type", vision_override_texts,
                 "PATTERN=TYPE for the vision file of the --text/--vision form (e.g. '^mm\\.=f16')");
  CLI11_PARSE(app, argc, argv);

  const bool pair = !text_type.empty() || !vision_type.empty();
  if (pair ? (!in_path.empty() || text_type.empty() || vision_type.empty() || model.empty() ||
              mmproj.empty() || out_dir.empty())
           : (type_name.empty() || !model.empty() || !mmproj.empty() || !out_dir.empty())) {
    return Fail("give IN OUT TYPE, or --text TYPE --vision TYPE -m TEXT --mmproj MMPROJ -o DIR "
                "(--help)");
  }
  if (!pair && !vision_override_texts.empty()) {
    return Fail("--vision-tensor-type belongs to the --text/--vision form");
  }
  if (alpha_option->count() > 0 && awq_path.empty()) return Fail("--awq-alpha needs --awq");
  std::vector<gguf::TensorTypeOverride> overrides, vision_overrides;
  for (const auto& [texts, out] : {std::pair{&override_texts, &overrides},
                                   std::pair{&vision_override_texts, &vision_overrides}}) {
    for (const std::string& text : *texts) {
      auto o = gguf::ParseTensorTypeOverride(text);
      if (!o.ok()) return Fail(o.status().message());
      out->push_back(*o);
    }
  }
  std::optional<gguf::ImportanceMatrix> imatrix;
  if (!imatrix_path.empty()) {
    auto m = gguf::ReadImatrixFile(imatrix_path);
    if (!m.ok()) return Fail(m.status().ToString());
    imatrix = std::move(*m);
  }
  std::optional<gguf::ImportanceMatrix> awq;
  if (!awq_path.empty()) {
    if (awq_path == imatrix_path) {
      awq = imatrix;
    } else {
      auto m = gguf::ReadImatrixFile(awq_path);
      if (!m.ok()) return Fail(m.status().ToString());
      awq = std::move(*m);
    }
  }
  ThreadPool pool(threads < 1 ? 1 : threads);
  gguf::QuantizeOptions text;
  text.overrides = overrides;
  text.imatrix = imatrix ? &*imatrix : nullptr;
  text.awq = awq ? &*awq : nullptr;
  text.awq_alpha = awq_alpha;
  const std::string text_name = pair ? text_type : type_name;
  const auto tt = engine::ParseDType(text_name);
  if (!tt) return Fail("unknown type '" + text_name + "'");
  text.type = *tt;
  if (imatrix && !engine::QuantizeUsesImportance(text.type)) {
    std::fprintf(stderr, "vlmd-quantize: warning: %s does not use the importance matrix (q4_0, "
                 "q4_k, q5_k and q6_k do)\n", text_name.c_str());
  }
  if (!pair) return QuantizeFile(in_path, out_path, text, &pool, quiet);

  const auto vt = engine::ParseDType(vision_type);
  if (!vt) return Fail("unknown type '" + vision_type + "'");
  for (const std::string& mismatch : {RoleMismatch(model, false), RoleMismatch(mmproj, true)}) {
    if (!mismatch.empty()) return Fail(mismatch);
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Fail("cannot create " + out_dir + ": " + ec.message());
  // Both files or neither: each is written beside its final name and renamed once both are done
  // (a missing or bad mmproj left a new text.gguf beside an older folder's mmproj.gguf).
  const std::string text_out = out_dir + "/text.gguf", vision_out = out_dir + "/mmproj.gguf";
  const std::string text_new = text_out + ".new", vision_new = vision_out + ".new";
  auto discard = [&] {
    std::filesystem::remove(text_new, ec);
    std::filesystem::remove(vision_new, ec);
  };
  int rc = QuantizeFile(model, text_new, text, &pool, quiet, text_out);
  if (rc != 0) {
    discard();
    return rc;
  }
  gguf::QuantizeOptions vision;
  vision.type = *vt;
  vision.overrides = vision_overrides;  // the imatrix records the text model's matrices only
  rc = QuantizeFile(mmproj, vision_new, vision, &pool, quiet, vision_out);
  if (rc != 0) {
    discard();
    return rc;
  }
  std::filesystem::rename(text_new, text_out, ec);
  if (!ec) std::filesystem::rename(vision_new, vision_out, ec);
  if (ec) {
    discard();
    return Fail("cannot write " + out_dir + ": " + ec.message());
  }
  return 0;
}

}  // namespace vlmd::tools::quantize
