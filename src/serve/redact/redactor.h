// Redaction before inference (issue 23 part 1, SPEC P9): faces and number plates found in a
// decoded RGB image are blurred, pixelated or filled in place, before the image is preprocessed,
// so that neither the encoder, the visual-embedding cache (its key is the redacted pixels'), a
// stream window nor a saved frame ever holds them. Detectors come from Debian's libraries, not
// hand-written: faces by dlib's HOG frontal-face detector (compiled in, no model file) or
// OpenCV's Haar cascade, plates by OpenCV's Russian number-plate cascade (opencv-data). README
// "Redaction" has the measured recall and time that chose the default face detector.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/image/image.h"

namespace vlmd::serve::redact {

enum class RedactKind { kFace, kPlate };
enum class RedactStyle { kBlur, kPixelate, kFill };
enum class FaceDetector { kHog, kHaar };

struct RedactOptions {
  bool faces = false;
  bool plates = false;
  RedactStyle style = RedactStyle::kBlur;
  // Detections scoring below this are left alone. Scores are the detectors' own: dlib HOG's SVM
  // margin and the cascades' last-stage sum (which can be negative for an accepted detection).
  // Unset: everything each detector accepts by its own threshold; HOG finds more below 0.
  std::optional<double> min_score;
  FaceDetector face_detector = FaceDetector::kHaar;  // recall on small faces (README "Redaction")
  // Where opencv-data puts the cascades.
  std::string cascade_dir = "/usr/share/opencv4/haarcascades";
  bool enabled() const { return faces || plates; }
};

// "faces", "plates", "faces,plates": INVALID_ARGUMENT naming anything else.
Status ParseRedactKinds(std::string_view list, RedactOptions* options);
// "blur" | "pixelate" | "fill"; "hog" | "haar".
Status ParseRedactStyle(std::string_view name, RedactStyle* style);
Status ParseFaceDetector(std::string_view name, FaceDetector* detector);
std::string_view RedactKindName(RedactKind kind);  // "faces" | "plates"
// A string that equals another's exactly when the settings do (caches, stream scopes).
std::string RedactSettingKey(const RedactOptions& options);

// Detection runs on the image scaled down to at most this many pixels on its longer side (boxes
// are scaled back): the cascades' cost grows with the pixel count, and a 50 MP photo must not
// take a core for tens of seconds. Faces under ~24 px at that scale are not found.
inline constexpr int kMaxDetectSide = 2048;

struct Region {
  RedactKind kind;
  int x = 0, y = 0, width = 0, height = 0;  // in image pixels, clipped to the image
  double score = 0;
};

struct Redaction {
  int faces = 0;
  int plates = 0;
  double detect_ms = 0;  // detection (covering the regions is not counted)
  std::vector<Region> regions;
};

class Redactor {
 public:
  // Loads the cascades the options need: NOT_FOUND naming a missing file (install opencv-data).
  static Result<std::shared_ptr<const Redactor>> Create(const RedactOptions& options);
  // Only that the cascade files the options need exist (NOT_FOUND as Create), without loading
  // them: the config check, before the server loads each setting once.
  static Status CheckFiles(const RedactOptions& options);
  ~Redactor();

  // The regions to cover in `image` (faces grown by a margin so hair line and chin go too).
  // Thread-safe: concurrent calls take separate detector instances. Fails closed: UNAVAILABLE
  // when no detector could run (an extra set would not load, or a detector threw), so that an
  // image is never passed on as if nothing were in it.
  Result<Redaction> Detect(const engine::image::Image& image) const;
  // Detects and covers the regions in place; pixels outside them do not change. Errors as
  // Detect (the image is then unchanged and must not be used).
  Result<Redaction> Apply(engine::image::Image* image) const;

  const RedactOptions& options() const { return options_; }

 private:
  struct Detectors;
  explicit Redactor(RedactOptions options);
  std::unique_ptr<Detectors> Take() const;
  void Give(std::unique_ptr<Detectors> d) const;
  Result<std::unique_ptr<Detectors>> Load() const;

  RedactOptions options_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Detectors>> idle_;  // reused across calls
};

// Covers `region` of `image` in `style` (exposed for tests).
void CoverRegion(engine::image::Image* image, const Region& region, RedactStyle style);

}  // namespace vlmd::serve::redact
