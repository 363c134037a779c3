// vlmd-quantize IN.gguf OUT.gguf TYPE [--imatrix FILE]: re-quantizes the weight matrices of a GGUF
// model (weighted by an importance matrix where given, as llama-quantize --imatrix) and prints
// each tensor's relative error ||W - Wq|| / ||W||.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "engine/gguf/imatrix.h"
#include "engine/gguf/quantize_model.h"
#include "engine/tensor/quantize.h"

namespace {

using vlmd::engine::DTypeName;

std::string Shape(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? " x " : "") + std::to_string(s[i]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Quantize the weight matrices of a GGUF model."};
  std::string in_path, out_path, type_name;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  bool quiet = false;
  std::string imatrix_path;
  app.add_option("input", in_path, "input GGUF")->required();
  app.add_option("output", out_path, "output GGUF")->required();
  app.add_option("type", type_name, "q8_0 q4_0 q4_1 q5_0 q4_k q5_k q6_k f16 bf16 f32")->required();
  app.add_option("-t,--threads", threads, "threads")->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "print only the summary");
  app.add_option("--imatrix", imatrix_path,
                 "importance matrix (llama.cpp's GGUF or legacy .dat imatrix): weighs q4_0, q4_k, "
                 "q5_k and q6_k by it");
  CLI11_PARSE(app, argc, argv);

  auto type = vlmd::engine::ParseDType(type_name);
  if (!type) {
    std::fprintf(stderr, "vlmd-quantize: error: unknown type '%s'\n", type_name.c_str());
    return 2;
  }
  std::optional<vlmd::engine::gguf::ImportanceMatrix> imatrix;
  if (!imatrix_path.empty()) {
    auto m = vlmd::engine::gguf::ReadImatrixFile(imatrix_path);
    if (!m.ok()) {
      std::fprintf(stderr, "vlmd-quantize: error: %s\n", m.status().ToString().c_str());
      return 2;
    }
    imatrix = std::move(*m);
    if (!vlmd::engine::QuantizeUsesImportance(*type)) {
      std::fprintf(stderr, "vlmd-quantize: warning: %s does not use the importance matrix (q4_0, "
                   "q4_k, q5_k and q6_k do)\n", type_name.c_str());
    }
  }
  vlmd::ThreadPool pool(threads < 1 ? 1 : threads);
  auto report = vlmd::engine::gguf::QuantizeModel(in_path, out_path, *type, &pool,
                                                  imatrix ? &*imatrix : nullptr);
  if (!report.ok()) {
    std::fprintf(stderr, "vlmd-quantize: error: %s\n", report.status().ToString().c_str());
    return 2;
  }
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
  std::printf("%d tensors quantized (%d with a fallback type), %zu kept; %.2f MiB -> %.2f MiB\n",
              n_quantized, n_fallback, report->tensors.size() - n_quantized,
              report->bytes_in / 1048576.0, report->bytes_out / 1048576.0);
  if (imatrix) {
    std::printf("%d of them weighted by the importance matrix (%zu entries)\n", n_weighted,
                imatrix->entries.size());
    if (n_weighted == 0 && vlmd::engine::QuantizeUsesImportance(*type)) {
      std::fprintf(stderr, "vlmd-quantize: warning: no matrix of the model has an entry in the "
                   "importance matrix (made for another model?)\n");
    }
  }
  return 0;
}
