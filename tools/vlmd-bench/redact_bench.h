// `vlmd-bench redact`: the two face detectors of redaction (dlib HOG, OpenCV's Haar cascade)
// measured against each other in the same run, and the plate cascade. Recall and false positives
// on scikit-image's LFW subset (`lfw_subset.npy`: 100 faces then 100 non-faces, 25x25 grayscale,
// from Debian's python3-skimage) with each crop enlarged into a gray canvas at each --scale;
// detection time on the given photos; plates on drawn plate scenes. Prints HOG/Haar ratios.
#pragma once

#include <string>
#include <vector>

namespace vlmd::bench {

struct RedactBenchOptions {
  std::string lfw_path;             // lfw_subset.npy ("" : skip recall)
  std::vector<int> scales = {2, 4};  // LFW crops enlarged to 25 x scale pixels
  std::vector<std::string> images;   // photos to time detection on
  int reps = 5;
};

int RunRedactBench(const RedactBenchOptions& opts);

}  // namespace vlmd::bench
