// Redaction (serve/redact/redactor.h) on a real photo (the NASA astronaut portrait Debian's
// python3-skimage ships) and on drawn number plates: what is found, that the found regions'
// pixels change and no other pixel does, in every style, with both face detectors.
#include "serve/redact/redactor.h"
#include "serve/redact/plate_scene.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <opencv2/imgproc.hpp>

#include "test_util.h"

namespace vlmd::serve::redact {
namespace {

using engine::image::Image;

Image Astronaut() {
  const std::vector<uint8_t> bytes = vlmd::testing::ReadFileBytes(vlmd::testing::SourcePath("tests/data/redact/astronaut.jpg"));
  auto img = engine::image::DecodeImage(bytes);
  EXPECT_TRUE(img.ok()) << img.status().ToString();
  return img.ok() ? std::move(*img) : Image{};
}

bool Inside(const Region& r, int x, int y) { return x >= r.x && x < r.x + r.width && y >= r.y && y < r.y + r.height; }

double Overlap(const Region& r, const cv::Rect& truth) {
  const cv::Rect both = cv::Rect(r.x, r.y, r.width, r.height) & truth;
  return double(both.area()) / truth.area();
}

// Every pixel outside the regions is unchanged; the regions changed (most of their pixels).
void ExpectOnlyRegionsChanged(const Image& before, const Image& after, const std::vector<Region>& regions) {
  ASSERT_EQ(before.rgb.size(), after.rgb.size());
  size_t outside_changed = 0, inside = 0, inside_changed = 0;
  for (int y = 0; y < before.height; ++y) {
    for (int x = 0; x < before.width; ++x) {
      const size_t at = (size_t(y) * before.width + x) * 3;
      const bool changed = before.rgb[at] != after.rgb[at] || before.rgb[at + 1] != after.rgb[at + 1] ||
                           before.rgb[at + 2] != after.rgb[at + 2];
      bool in = false;
      for (const Region& r : regions) in |= Inside(r, x, y);
      if (in) {
        ++inside;
        inside_changed += changed;
      } else {
        outside_changed += changed;
      }
    }
  }
  EXPECT_EQ(outside_changed, 0u);
  EXPECT_GT(inside, 0u);
  EXPECT_GT(double(inside_changed), 0.5 * double(inside));
}

const cv::Rect kAstronautFace(177, 66, 95, 95);

TEST(Redactor, FindsTheAstronautsFaceWithBothDetectorsAndCoversOnlyIt) {
  // What looks for faces again in the covered images: both detectors.
  std::vector<std::shared_ptr<const Redactor>> checkers;
  for (FaceDetector again : {FaceDetector::kHog, FaceDetector::kHaar}) {
    RedactOptions look;
    look.faces = true;
    look.face_detector = again;
    auto checker = Redactor::Create(look);
    ASSERT_TRUE(checker.ok());
    checkers.push_back(*checker);
  }
  for (FaceDetector detector : {FaceDetector::kHog, FaceDetector::kHaar}) {
    for (RedactStyle style : {RedactStyle::kBlur, RedactStyle::kPixelate, RedactStyle::kFill}) {
      RedactOptions o;
      o.faces = true;
      o.face_detector = detector;
      o.style = style;
      auto r = Redactor::Create(o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const Image before = Astronaut();
      Image after = before;
      auto applied = (*r)->Apply(&after);
      ASSERT_TRUE(applied.ok()) << applied.status().ToString();
      const Redaction& red = *applied;
      SCOPED_TRACE(std::string(detector == FaceDetector::kHog ? "hog" : "haar") + " style " +
                   std::to_string(int(style)));
      EXPECT_GE(red.faces, 1);
      EXPECT_EQ(red.plates, 0);
      EXPECT_EQ(red.faces, int(red.regions.size()));
      bool face = false;
      for (const Region& region : red.regions) face |= Overlap(region, kAstronautFace) > 0.9;
      EXPECT_TRUE(face) << "no region covers the face";
      ExpectOnlyRegionsChanged(before, after, red.regions);
      // Covered means gone: neither detector finds a face in a covered region again.
      for (const auto& checker : checkers) {
        auto found = checker->Detect(after);
        ASSERT_TRUE(found.ok());
        for (const Region& f : found->regions) {
          for (const Region& covered : red.regions) {
            EXPECT_LT(Overlap(f, cv::Rect(covered.x, covered.y, covered.width, covered.height)), 0.5)
                << "a face found again at " << f.x << "," << f.y << " " << f.width << "x" << f.height;
          }
        }
      }
    }
  }
}

TEST(Redactor, FindsDrawnNumberPlates) {
  RedactOptions o;
  o.plates = true;
  o.style = RedactStyle::kFill;
  auto r = Redactor::Create(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int found = 0, scenes = 0;
  for (int width : {140, 200, 260}) {
    for (const char* text : {"A123BC77", "K777KK99", "E001XT"}) {
      for (int font : {cv::FONT_HERSHEY_SIMPLEX, cv::FONT_HERSHEY_DUPLEX}) {
        std::array<int, 4> box;
        const Image before = PlateScene(width, text, font, &box);
        const cv::Rect plate(box[0], box[1], box[2], box[3]);
        Image after = before;
        auto applied = (*r)->Apply(&after);
        ASSERT_TRUE(applied.ok());
        const Redaction& red = *applied;
        ++scenes;
        bool covered = false;
        for (const Region& region : red.regions) covered |= Overlap(region, plate) > 0.8;
        found += covered;
        EXPECT_EQ(red.faces, 0);
        if (!red.regions.empty()) ExpectOnlyRegionsChanged(before, after, red.regions);
      }
    }
  }
  EXPECT_GE(found, scenes - 1) << found << " of " << scenes << " plates found";
}

TEST(Redactor, APlainImageIsLeftAloneAndOffMeansOff) {
  Image plain;
  plain.width = 320;
  plain.height = 240;
  plain.rgb.resize(size_t(320) * 240 * 3);
  for (size_t i = 0; i < plain.rgb.size(); ++i) plain.rgb[i] = uint8_t((i / 3) % 320 * 255 / 319);
  RedactOptions o;
  o.faces = o.plates = true;
  auto r = Redactor::Create(o);
  ASSERT_TRUE(r.ok());
  Image after = plain;
  auto red = (*r)->Apply(&after);
  ASSERT_TRUE(red.ok());
  EXPECT_EQ(red->faces + red->plates, 0);
  EXPECT_EQ(after.rgb, plain.rgb);
  // Nothing asked for: nothing found on the face either.
  auto off = Redactor::Create(RedactOptions{});
  ASSERT_TRUE(off.ok());
  Image astronaut = Astronaut();
  const std::vector<uint8_t> pixels = astronaut.rgb;
  EXPECT_EQ((*off)->Apply(&astronaut)->regions.size(), 0u);
  EXPECT_EQ(astronaut.rgb, pixels);
}

TEST(Redactor, AHighMinimumScoreKeepsOnlySureDetections) {
  RedactOptions o;
  o.faces = true;
  o.min_score = 1e6;  // no cascade sum reaches this
  auto r = Redactor::Create(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->Detect(Astronaut())->faces, 0);
}

TEST(Redactor, LargeImagesAreSearchedAtABoundedSizeAndTheBoxesScaledBack) {
  // The astronaut tiled 6 x 6 (3072 px wide): searched at 2048, each face still found where it is.
  const Image one = Astronaut();
  Image big;
  big.width = one.width * 6;
  big.height = one.height * 6;
  big.rgb.resize(size_t(big.width) * big.height * 3);
  for (int y = 0; y < big.height; ++y) {
    for (int x = 0; x < big.width; ++x) {
      const size_t from = (size_t(y % one.height) * one.width + x % one.width) * 3;
      std::copy_n(one.rgb.begin() + long(from), 3, big.rgb.begin() + long((size_t(y) * big.width + x) * 3));
    }
  }
  RedactOptions o;
  o.faces = true;
  auto r = Redactor::Create(o);
  ASSERT_TRUE(r.ok());
  auto found = (*r)->Detect(big);
  ASSERT_TRUE(found.ok());
  int tiles_with_face = 0;
  for (int ty = 0; ty < 6; ++ty) {
    for (int tx = 0; tx < 6; ++tx) {
      const cv::Rect face(kAstronautFace.x + tx * one.width, kAstronautFace.y + ty * one.height, kAstronautFace.width,
                          kAstronautFace.height);
      for (const Region& g : found->regions) {
        if (Overlap(g, face) > 0.8) {
          ++tiles_with_face;
          break;
        }
      }
    }
  }
  EXPECT_GE(tiles_with_face, 30) << "of 36";
}

TEST(Redactor, OptionsAreParsedStrictlyAndMissingCascadesNamed) {
  RedactOptions o;
  EXPECT_TRUE(ParseRedactKinds("faces,plates", &o).ok());
  EXPECT_TRUE(o.faces && o.plates);
  EXPECT_TRUE(ParseRedactKinds("plates", &o).ok());
  EXPECT_TRUE(!o.faces && o.plates);
  EXPECT_FALSE(ParseRedactKinds("faces,cars", &o).ok());
  EXPECT_FALSE(ParseRedactKinds("", &o).ok());
  EXPECT_FALSE(ParseRedactKinds("faces,", &o).ok());
  RedactStyle style;
  EXPECT_TRUE(ParseRedactStyle("pixelate", &style).ok());
  EXPECT_EQ(style, RedactStyle::kPixelate);
  EXPECT_FALSE(ParseRedactStyle("smudge", &style).ok());
  FaceDetector detector;
  EXPECT_TRUE(ParseFaceDetector("haar", &detector).ok());
  EXPECT_FALSE(ParseFaceDetector("cnn", &detector).ok());
  RedactOptions missing;
  missing.plates = true;
  missing.cascade_dir = "/nonexistent";
  auto r = Redactor::Create(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("opencv-data"), std::string::npos);
  EXPECT_EQ(Redactor::CheckFiles(missing).code(), StatusCode::kNotFound);
  // A file that is not a cascade (OpenCV throws on it): an error, not an exception.
  const std::string dir = std::filesystem::temp_directory_path().string() + "/vlmd-bad-cascade-" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/haarcascade_russian_plate_number.xml") << "not a cascade";
  RedactOptions garbage = missing;
  garbage.cascade_dir = dir;
  EXPECT_TRUE(Redactor::CheckFiles(garbage).ok());  // it exists
  auto bad = Redactor::Create(garbage);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
  std::filesystem::remove_all(dir);
  // HOG needs no file: faces alone load anywhere.
  RedactOptions hog;
  hog.faces = true;
  hog.face_detector = FaceDetector::kHog;
  hog.cascade_dir = "/nonexistent";
  EXPECT_TRUE(Redactor::Create(hog).ok());
}

}  // namespace
}  // namespace vlmd::serve::redact
