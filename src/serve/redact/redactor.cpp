// Face and plate redaction with dlib and OpenCV (see redactor.h).
#include "serve/redact/redactor.h"

#include <dlib/image_processing/frontal_face_detector.h>
#include <dlib/opencv.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/objdetect.hpp>

namespace vlmd::serve::redact {
namespace {

constexpr const char* kFaceCascade = "haarcascade_frontalface_default.xml";
constexpr const char* kPlateCascade = "haarcascade_russian_plate_number.xml";
// Smallest regions searched: the cascades' training windows (24x24 faces, 60x20 plates' half).
const cv::Size kMinFace(24, 24);
const cv::Size kMinPlate(40, 13);

// Faces: the detectors frame eyes to mouth; hair, ears and chin identify too.
Region Grow(Region r, double by, int width, int height) {
  const int dx = int(r.width * by), dy = int(r.height * by);
  const int x0 = std::max(0, r.x - dx), y0 = std::max(0, r.y - dy);
  const int x1 = std::min(width, r.x + r.width + dx), y1 = std::min(height, r.y + r.height + dy);
  r.x = x0;
  r.y = y0;
  r.width = std::max(0, x1 - x0);
  r.height = std::max(0, y1 - y0);
  return r;
}

}  // namespace

struct Redactor::Detectors {
  dlib::frontal_face_detector hog;
  cv::CascadeClassifier face_cascade;
  cv::CascadeClassifier plate_cascade;
};

Status ParseRedactKinds(std::string_view list, RedactOptions* o) {
  o->faces = o->plates = false;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view kind = list.substr(start, comma - start);
    if (kind == "faces") {
      o->faces = true;
    } else if (kind == "plates") {
      o->plates = true;
    } else {
      return InvalidArgumentError("redact: '" + std::string(kind) + "': expected faces and/or plates");
    }
    start = comma + 1;
  }
  return Status::Ok();
}

Status ParseRedactStyle(std::string_view name, RedactStyle* style) {
  if (name == "blur") {
    *style = RedactStyle::kBlur;
  } else if (name == "pixelate") {
    *style = RedactStyle::kPixelate;
  } else if (name == "fill") {
    *style = RedactStyle::kFill;
  } else {
    return InvalidArgumentError(std::string("'").append(name) +
                                "': expected blur, pixelate or fill");
  }
  return Status::Ok();
}

Status ParseFaceDetector(std::string_view name, FaceDetector* detector) {
  if (name == "hog") {
    *detector = FaceDetector::kHog;
  } else if (name == "haar") {
    *detector = FaceDetector::kHaar;
  } else {
    return InvalidArgumentError(std::string("'").append(name) +
                                "': expected hog (dlib) or haar (OpenCV)");
  }
  return Status::Ok();
}

std::string_view RedactKindName(RedactKind kind) { return kind == RedactKind::kFace ? "faces" : "plates"; }

std::string RedactSettingKey(const RedactOptions& o) {
  char score[40] = "unset";
  if (o.min_score) std::snprintf(score, sizeof score, "%.17g", *o.min_score);
  return std::string(o.faces ? "F" : "-") + (o.plates ? "P" : "-") + ":" + std::to_string(int(o.style)) + ":" +
         std::to_string(int(o.face_detector)) + ":" + score + ":" + o.cascade_dir;
}

Result<std::shared_ptr<const Redactor>> Redactor::Create(const RedactOptions& options) {
  // Detection runs on the calling request thread, OpenCV's own thread pool off: concurrent
  // requests spread over the cores instead of each fanning out over all of them, and no pool
  // threads outlive their work (LeakSanitizer's exit scan crashed on them).
  static std::once_flag sequential;
  std::call_once(sequential, [] { cv::setNumThreads(0); });
  std::shared_ptr<Redactor> r(new Redactor(options));
  VLMD_ASSIGN_OR_RETURN(auto first, r->Load());
  r->idle_.push_back(std::move(first));
  return std::shared_ptr<const Redactor>(std::move(r));
}

namespace {

std::string CascadePath(const RedactOptions& options, const char* file) {
  return (std::filesystem::path(options.cascade_dir) / file).string();
}

}  // namespace

Status Redactor::CheckFiles(const RedactOptions& options) {
  auto check = [&](const char* file) -> Status {
    const std::string path = CascadePath(options, file);
    if (!std::filesystem::exists(path)) {
      return NotFoundError("redaction: cascade " + path + " not found (install opencv-data)");
    }
    return Status::Ok();
  };
  if (options.faces && options.face_detector == FaceDetector::kHaar) {
    VLMD_RETURN_IF_ERROR(check(kFaceCascade));
  }
  if (options.plates) VLMD_RETURN_IF_ERROR(check(kPlateCascade));
  return Status::Ok();
}

Redactor::Redactor(RedactOptions options) : options_(std::move(options)) {}

Redactor::~Redactor() = default;

Result<std::unique_ptr<Redactor::Detectors>> Redactor::Load() const {
  VLMD_RETURN_IF_ERROR(CheckFiles(options_));  // a missing file: NOT_FOUND naming it
  auto d = std::make_unique<Detectors>();
  auto load = [&](cv::CascadeClassifier& c, const char* file) -> Status {
    const std::string path = CascadePath(options_, file);
    // OpenCV throws on a file that is not a cascade at all (and returns false on others).
    bool loaded = false;
    try {
      loaded = c.load(path);
    } catch (const cv::Exception& e) {
      return InvalidArgumentError("redaction: cannot load the cascade " + path + ": " + e.what());
    }
    if (!loaded) return InvalidArgumentError("redaction: cannot load the cascade " + path);
    return Status::Ok();
  };
  if (options_.faces && options_.face_detector == FaceDetector::kHaar) {
    VLMD_RETURN_IF_ERROR(load(d->face_cascade, kFaceCascade));
  }
  if (options_.faces && options_.face_detector == FaceDetector::kHog) d->hog = dlib::get_frontal_face_detector();
  if (options_.plates) VLMD_RETURN_IF_ERROR(load(d->plate_cascade, kPlateCascade));
  return d;
}

std::unique_ptr<Redactor::Detectors> Redactor::Take() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto d = std::move(idle_.back());
      idle_.pop_back();
      return d;
    }
  }
  auto loaded = Load();  // loaded once by Create: the files are there
  return loaded.ok() ? std::move(*loaded) : nullptr;
}

void Redactor::Give(std::unique_ptr<Detectors> d) const {
  if (!d) return;
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(d));
}

Result<Redaction> Redactor::Detect(const engine::image::Image& image) const {
  Redaction out;
  if (!options_.enabled() || image.width <= 0 || image.height <= 0) return out;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Detectors> d = Take();
  if (!d) return UnavailableError("redaction: no detector could be loaded for this image");
  try {
    cv::Mat rgb(image.height, image.width, CV_8UC3, const_cast<uint8_t*>(image.rgb.data()));
    cv::Mat gray;
    cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);
    // Large images are searched at a bounded size (kMaxDetectSide), boxes scaled back.
    const double scale = std::min(1.0, double(kMaxDetectSide) / std::max(image.width, image.height));
    if (scale < 1.0) {
      cv::Mat small;
      cv::resize(gray, small, cv::Size(std::max(1, int(image.width * scale)), std::max(1, int(image.height * scale))),
                 0, 0, cv::INTER_AREA);
      gray = small;
    }
    auto add = [&](RedactKind kind, double x, double y, double w, double h, double score, double grow) {
      if (options_.min_score && score < *options_.min_score) return;
      Region r{kind, int(std::floor(x / scale)), int(std::floor(y / scale)), int(std::ceil(w / scale)),
               int(std::ceil(h / scale)), score};
      r = Grow(r, grow, image.width, image.height);
      if (r.width <= 0 || r.height <= 0) return;
      out.regions.push_back(r);
      (kind == RedactKind::kFace ? out.faces : out.plates) += 1;
    };
    auto cascade = [&](cv::CascadeClassifier& c, cv::Size min_size, RedactKind kind, double grow) {
      std::vector<cv::Rect> rects;
      std::vector<int> levels;
      std::vector<double> weights;
      c.detectMultiScale(gray, rects, levels, weights, 1.1, 3, 0, min_size, cv::Size(), true);
      for (size_t i = 0; i < rects.size(); ++i) {
        add(kind, rects[i].x, rects[i].y, rects[i].width, rects[i].height, i < weights.size() ? weights[i] : 0.0,
            grow);
      }
    };
    if (options_.faces) {
      if (options_.face_detector == FaceDetector::kHog) {
        dlib::cv_image<unsigned char> view(gray);
        std::vector<dlib::rect_detection> found;
        d->hog(view, found, options_.min_score ? std::min(0.0, *options_.min_score) : 0.0);
        for (const auto& f : found) {
          add(RedactKind::kFace, double(f.rect.left()), double(f.rect.top()), double(f.rect.width()),
              double(f.rect.height()), f.detection_confidence, 0.25);
        }
      } else {
        cascade(d->face_cascade, kMinFace, RedactKind::kFace, 0.15);
      }
    }
    if (options_.plates) cascade(d->plate_cascade, kMinPlate, RedactKind::kPlate, 0.05);
  } catch (const std::exception& e) {
    // A detector that threw says nothing about the image: fail closed (the detector set is
    // dropped, not returned to the pool).
    return UnavailableError(std::string("redaction: a detector failed: ") + e.what());
  }
  Give(std::move(d));
  out.detect_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Result<Redaction> Redactor::Apply(engine::image::Image* image) const {
  VLMD_ASSIGN_OR_RETURN(Redaction r, Detect(*image));
  for (const Region& region : r.regions) CoverRegion(image, region, options_.style);
  return r;
}

void CoverRegion(engine::image::Image* image, const Region& region, RedactStyle style) {
  if (region.width <= 0 || region.height <= 0) return;
  cv::Mat rgb(image->height, image->width, CV_8UC3, image->rgb.data());
  cv::Mat roi = rgb(cv::Rect(region.x, region.y, region.width, region.height));
  switch (style) {
    case RedactStyle::kFill:
      roi.setTo(cv::Scalar(0, 0, 0));
      break;
    case RedactStyle::kPixelate: {
      // At most 4 blocks across the shorter side: finer mosaics keep eye and mouth bands that a
      // detector (and a recognizer) still finds (an 8x8 one was found again by the Haar cascade).
      const int block = std::max(8, std::min(region.width, region.height) / 4);
      cv::Mat small;
      cv::resize(roi, small, cv::Size(std::max(1, region.width / block), std::max(1, region.height / block)), 0, 0,
                 cv::INTER_AREA);
      cv::resize(small, roi, roi.size(), 0, 0, cv::INTER_NEAREST);
      break;
    }
    case RedactStyle::kBlur: {
      // A box blur as wide as half the region, twice: strong enough that no face is recognized.
      const int k = std::max(3, std::min(region.width, region.height) / 2) | 1;
      cv::Mat blurred;
      cv::blur(roi, blurred, cv::Size(k, k), cv::Point(-1, -1), cv::BORDER_REPLICATE);
      cv::blur(blurred, roi, cv::Size(k, k), cv::Point(-1, -1), cv::BORDER_REPLICATE);
      break;
    }
  }
}

}  // namespace vlmd::serve::redact
