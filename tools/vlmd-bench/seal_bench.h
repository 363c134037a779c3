// `vlmd-bench seal`: what a sealed model (core/sealed_file.h) costs at load. Seals the given files
// with a random key into a scratch folder, then times, in the same run: decryption alone (SM4-CTR
// + HMAC per chunk: MB/s, and per core), and the engine's whole load (VlmEngine::Load with the
// files' hash, as the server loads) of the plain files against the sealed ones, with the ratio.
#pragma once

#include <string>
#include <vector>

namespace vlmd::bench {

struct SealBenchOptions {
  std::string model_path;
  std::string mmproj_path;
  std::vector<int> threads = {1, 2};
  int reps = 3;
  std::string scratch_dir;  // "" : the system's temporary folder
};

int RunSealBench(const SealBenchOptions& opts);

}  // namespace vlmd::bench
