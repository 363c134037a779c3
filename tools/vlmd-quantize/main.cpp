// vlmd-quantize IN.gguf OUT.gguf TYPE: re-quantizes the weight matrices of a GGUF model and prints
// each tensor's relative error ||W - Wq|| / ||W||.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <thread>

#include "engine/gguf/quantize_model.h"

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
  app.add_option("input", in_path, "input GGUF")->required();
  app.add_option("output", out_path, "output GGUF")->required();
  app.add_option("type", type_name, "q8_0 q4_0 q4_1 q5_0 q4_k q5_k q6_k f16 bf16 f32")->required();
  app.add_option("-t,--threads", threads, "threads")->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "print only the summary");
  CLI11_PARSE(app, argc, argv);

  auto type = vlmd::engine::ParseDType(type_name);
  if (!type) {
    std::fprintf(stderr, "vlmd-quantize: error: unknown type '%s'\n", type_name.c_str());
    return 2;
  }
  vlmd::ThreadPool pool(threads < 1 ? 1 : threads);
  auto report = vlmd::engine::gguf::QuantizeModel(in_path, out_path, *type, &pool);
  if (!report.ok()) {
    std::fprintf(stderr, "vlmd-quantize: error: %s\n", report.status().ToString().c_str());
    return 2;
  }
  int n_quantized = 0, n_fallback = 0;
  for (const auto& t : report->tensors) {
    if (t.quantized) ++n_quantized;
    if (t.fell_back) ++n_fallback;
    if (quiet) continue;
    if (t.quantized) {
      std::printf("%-40s %-18s %5s -> %-5s rel_err %.3e%s\n", t.name.c_str(),
                  Shape(t.shape).c_str(), std::string(DTypeName(t.from)).c_str(),
                  std::string(DTypeName(t.to)).c_str(), t.rel_error,
                  t.fell_back ? "  (fallback: row length does not fit the block)" : "");
    } else {
      std::printf("%-40s %-18s %5s    kept\n", t.name.c_str(), Shape(t.shape).c_str(),
                  std::string(DTypeName(t.from)).c_str());
    }
  }
  std::printf("%d tensors quantized (%d with a fallback type), %zu kept; %.2f MiB -> %.2f MiB\n",
              n_quantized, n_fallback, report->tensors.size() - n_quantized,
              report->bytes_in / 1048576.0, report->bytes_out / 1048576.0);
  return 0;
}
