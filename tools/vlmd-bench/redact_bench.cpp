// `vlmd-bench redact` (see redact_bench.h).
#include "redact_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <opencv2/imgproc.hpp>

#include "core/read_file.h"
#include "serve/redact/plate_scene.h"
#include "serve/redact/redactor.h"

namespace vlmd::bench {
namespace {

namespace redact = serve::redact;
using engine::image::Image;

// scikit-image's lfw_subset.npy: a NumPy v1 file of float64 [200, 25, 25] in [0, 1].
bool ReadLfw(const std::string& path, std::vector<double>* pixels) {
  auto file = ReadWholeFile(path);
  if (!file.ok()) return false;
  const std::string& b = *file;
  if (b.size() < 10 || b.compare(1, 5, "NUMPY") != 0) return false;
  const size_t header = 10 + (uint8_t(b[8]) | (uint8_t(b[9]) << 8));
  const std::string dict = b.substr(10, header - 10);
  if (dict.find("'<f8'") == std::string::npos || dict.find("(200, 25, 25)") == std::string::npos) return false;
  if (b.size() < header + 200 * 625 * 8) return false;
  pixels->resize(200 * 625);
  std::memcpy(pixels->data(), b.data() + header, pixels->size() * 8);
  return true;
}

// Crop k (grayscale) enlarged `scale` times, in the middle of a gray canvas twice its size.
Image Canvas(const std::vector<double>& lfw, int k, int scale) {
  cv::Mat crop(25, 25, CV_8U);
  for (int i = 0; i < 625; ++i) crop.data[i] = uint8_t(std::clamp(lfw[size_t(k) * 625 + i], 0.0, 1.0) * 255.0);
  const int side = 25 * scale;
  cv::Mat big;
  cv::resize(crop, big, cv::Size(side, side), 0, 0, cv::INTER_CUBIC);
  cv::Mat canvas(2 * side, 2 * side, CV_8U, cv::Scalar(128));
  big.copyTo(canvas(cv::Rect(side / 2, side / 2, side, side)));
  Image img;
  img.width = img.height = 2 * side;
  img.rgb.resize(size_t(img.width) * img.height * 3);
  for (size_t i = 0; i < size_t(img.width) * img.height; ++i) {
    img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = canvas.data[i];
  }
  return img;
}

// What a detection found (nothing when it failed: counted as a miss).
redact::Redaction Found(const Result<redact::Redaction>& r) { return r.ok() ? *r : redact::Redaction{}; }

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::shared_ptr<const redact::Redactor> Make(bool faces, redact::FaceDetector detector) {
  redact::RedactOptions o;
  o.faces = faces;
  o.plates = !faces;
  o.face_detector = detector;
  auto r = redact::Redactor::Create(o);
  if (!r.ok()) {
    std::fprintf(stderr, "vlmd-bench redact: %s\n", r.status().ToString().c_str());
    return nullptr;
  }
  return *r;
}

double MedianMs(const redact::Redactor& r, const Image& img, int reps) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)r.Detect(img);
    ms.push_back(Ms(t0));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int RunRedactBench(const RedactBenchOptions& opts) {
  const auto hog = Make(true, redact::FaceDetector::kHog);
  const auto haar = Make(true, redact::FaceDetector::kHaar);
  const auto plates = Make(false, redact::FaceDetector::kHog);
  if (!hog || !haar || !plates) return 1;
  std::printf("face detectors: dlib HOG vs OpenCV Haar (haarcascade_frontalface_default), same run\n");
  if (!opts.lfw_path.empty()) {
    std::vector<double> lfw;
    if (!ReadLfw(opts.lfw_path, &lfw)) {
      std::fprintf(stderr, "vlmd-bench redact: %s is not scikit-image's lfw_subset.npy\n", opts.lfw_path.c_str());
      return 1;
    }
    for (int scale : opts.scales) {
      int found[2] = {0, 0}, false_pos[2] = {0, 0};
      double ms[2] = {0, 0};
      for (int k = 0; k < 200; ++k) {
        const Image img = Canvas(lfw, k, scale);
        const redact::Redactor* rs[2] = {hog.get(), haar.get()};
        for (int d = 0; d < 2; ++d) {
          const auto t0 = std::chrono::steady_clock::now();
          const int n = Found(rs[d]->Detect(img)).faces;
          ms[d] += Ms(t0);
          (k < 100 ? found[d] : false_pos[d]) += n > 0;
        }
      }
      std::printf("LFW faces %3d px (canvas %d px): HOG recall %3d/100, false %3d/100, %.2f ms/img | Haar recall "
                  "%3d/100, false %3d/100, %.2f ms/img | HOG/Haar time %.2fx\n",
                  25 * scale, 50 * scale, found[0], false_pos[0], ms[0] / 200, found[1], false_pos[1], ms[1] / 200,
                  ms[0] / ms[1]);
    }
  }
  for (const std::string& path : opts.images) {
    auto file = ReadWholeFile(path);
    auto img = file.ok() ? engine::image::DecodeImage(BytesOf(*file)) : Result<Image>(file.status());
    if (!img.ok()) {
      std::fprintf(stderr, "vlmd-bench redact: %s: %s\n", path.c_str(), img.status().ToString().c_str());
      return 1;
    }
    const double h = MedianMs(*hog, *img, opts.reps), c = MedianMs(*haar, *img, opts.reps);
    std::printf("%s (%dx%d): HOG %d faces %.1f ms | Haar %d faces %.1f ms | HOG/Haar time %.2fx\n", path.c_str(),
                img->width, img->height, Found(hog->Detect(*img)).faces, h, Found(haar->Detect(*img)).faces, c, h / c);
  }
  int found = 0, scenes = 0;
  double ms = 0;
  for (int width : {100, 140, 200, 260}) {
    for (const char* text : {"A123BC77", "K777KK99", "M456OP50", "E001XT"}) {
      for (int font : {cv::FONT_HERSHEY_SIMPLEX, cv::FONT_HERSHEY_DUPLEX, cv::FONT_HERSHEY_PLAIN}) {
        std::array<int, 4> box;
        const Image img = redact::PlateScene(width, text, font, &box);
        const auto t0 = std::chrono::steady_clock::now();
        const redact::Redaction r = Found(plates->Detect(img));
        ms += Ms(t0);
        ++scenes;
        const cv::Rect truth(box[0], box[1], box[2], box[3]);
        for (const redact::Region& g : r.regions) {
          if ((cv::Rect(g.x, g.y, g.width, g.height) & truth).area() > 0.8 * truth.area()) {
            ++found;
            break;
          }
        }
      }
    }
  }
  std::printf("plates (haarcascade_russian_plate_number) on %d drawn 640x480 scenes, plates 100-260 px wide: "
              "found %d/%d, %.1f ms/img\n",
              scenes, found, scenes, ms / scenes);
  return 0;
}

}  // namespace vlmd::bench
