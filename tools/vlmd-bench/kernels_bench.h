// `vlmd-bench kernels`: matmul paths against the machine limits measured in the same run.
#pragma once

#include <string>
#include <vector>

namespace vlmd::bench {

struct KernelsBenchOptions {
  std::vector<int> threads = {1, 2};
  bool quick = false;        // fewer shapes and repetitions (smoke runs)
  std::string json_path;     // "-" for stdout, empty for none
};

// Runs the benchmark, prints the table to stdout (and JSON where asked). Returns the exit code.
int RunKernelsBench(const KernelsBenchOptions& opts);

}  // namespace vlmd::bench
