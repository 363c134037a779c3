// vlmd-bench seal (see seal_bench.h).
#include "seal_bench.h"

#include <openssl/rand.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/model_key.h"
#include "core/sealed_file.h"
#include "core/thread_pool.h"
#include "engine/runtime/vlm_engine.h"

namespace vlmd::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}


}  // namespace

int RunSealBench(const SealBenchOptions& opts) {
  SecretKey key;
  if (RAND_bytes(key.bytes.data(), static_cast<int>(key.bytes.size())) != 1) return 2;
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "vlmd-bench: error: %s\n", message.c_str());
    return 2;
  };
  // The inputs first (the error codes, not exceptions): nothing is created for a missing file.
  std::error_code ec;
  std::vector<std::pair<std::string, uint64_t>> inputs;
  for (const std::string& p : {opts.model_path, opts.mmproj_path}) {
    if (p.empty()) continue;
    const uint64_t size = fs::file_size(p, ec);
    if (ec) return fail("cannot read '" + p + "': " + ec.message());
    inputs.emplace_back(p, size);
  }
  const fs::path dir = fs::path(opts.scratch_dir.empty() ? fs::temp_directory_path().string() : opts.scratch_dir) /
                       ("vlmd-seal-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir, ec);
  if (ec) return fail("cannot create '" + dir.string() + "': " + ec.message());
  struct File {
    std::string plain, sealed;
    uint64_t bytes = 0;
  };
  std::vector<File> files;
  for (const auto& [p, size] : inputs) {
    files.push_back({p, (dir / (fs::path(p).filename().string() + ".sealed")).string(), size});
  }
  int rc = 0;
  {
    ThreadPool pool(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
    for (const File& f : files) {
      if (Status s = SealFile(f.plain, f.sealed, key, {"bench"}, &pool); !s.ok()) {
        std::fprintf(stderr, "vlmd-bench: error: %s\n", s.ToString().c_str());
        fs::remove_all(dir);
        return 2;
      }
    }
  }
  uint64_t total = 0;
  for (const File& f : files) total += f.bytes;
  std::printf("files: %.1f MiB (%s%s), %d reps, median\n", total / 1048576.0, opts.model_path.c_str(),
              opts.mmproj_path.empty() ? "" : (" + " + opts.mmproj_path).c_str(), opts.reps);
  std::printf("%-8s %14s %14s %16s %14s %14s %8s\n", "threads", "unseal s", "unseal MB/s", "MB/s per core",
              "load plain s", "load sealed s", "ratio");
  // The engine takes the random key from the environment variable of this process only.
  std::string hex = HexOf(key.bytes);
  ::setenv(kModelKeyEnv, hex.c_str(), 1);
  WipeBytes(hex.data(), hex.size());
  const ModelKeySource source;
  for (int threads : opts.threads) {
    ThreadPool pool(threads);
    std::vector<double> unseal, plain, sealed;
    for (int r = 0; r < opts.reps && rc == 0; ++r) {
      auto t0 = Clock::now();
      for (const File& f : files) {
        auto buf = UnsealFile(f.sealed, key, &pool);
        if (!buf.ok()) {
          std::fprintf(stderr, "vlmd-bench: error: %s\n", buf.status().ToString().c_str());
          rc = 2;
        }
      }
      unseal.push_back(Seconds(t0));
      for (bool use_sealed : {false, true}) {
        engine::runtime::EngineOptions eo;
        eo.threads = threads;
        eo.hash_files = true;
        eo.n_ctx = 512;
        eo.precision = engine::ops::Precision::kFast;
        eo.mmproj_path = files.size() > 1 ? (use_sealed ? files[1].sealed : files[1].plain) : "";
        eo.model_key = source;
        t0 = Clock::now();
        auto e = engine::runtime::VlmEngine::Load(use_sealed ? files[0].sealed : files[0].plain, eo);
        (use_sealed ? sealed : plain).push_back(Seconds(t0));
        if (!e.ok()) {
          std::fprintf(stderr, "vlmd-bench: error: %s\n", e.status().ToString().c_str());
          rc = 2;
        }
      }
    }
    if (rc != 0) break;
    const double u = Median(unseal), mbs = total / 1e6 / u;
    std::printf("%-8d %14.3f %14.1f %16.1f %14.3f %14.3f %7.2fx\n", threads, u, mbs, mbs / threads,
                Median(plain), Median(sealed), Median(sealed) / Median(plain));
  }
  fs::remove_all(dir);
  ::unsetenv(kModelKeyEnv);
  return rc;
}

}  // namespace vlmd::bench
