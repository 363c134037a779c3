// `vlmd-bench model`: prefill and decode speed of a text model at 1 and 2 threads, beside the
// decode bound measured in the same run (read bandwidth / weight bytes read per token).
#pragma once

#include <string>
#include <vector>

namespace vlmd::bench {

struct ModelBenchOptions {
  std::string model_path;
  std::string mmproj_path;  // when set: also image encode time of one image_side^2 image
  int image_side = 512;
  int image_height = 0;  // 0: a square image_side x image_side image
  std::vector<int> threads = {1, 2};
  int prompt_tokens = 512;
  int gen_tokens = 128;
  int reps = 3;
  std::string precision = "fast";  // exact | fast
  bool json = false;  // print one JSON object per thread count instead of the table
};

int RunModelBench(const ModelBenchOptions& opts);

}  // namespace vlmd::bench
