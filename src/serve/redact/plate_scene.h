// A drawn number-plate scene for the redaction tests and benchmark: a gray street, a dark car and
// a white plate (Russian proportions, 520 x 112) with black characters in one of OpenCV's
// Hershey fonts, the kind of plate OpenCV's haarcascade_russian_plate_number finds.
#pragma once

#include <array>

#include "engine/image/image.h"

namespace vlmd::serve::redact {

// A 640x480 RGB scene with a plate `width` pixels wide (40 to 600) spelling `text` in Hershey
// font `font` (cv::HersheyFonts). *plate receives the plate's {x, y, width, height}.
engine::image::Image PlateScene(int width, const char* text, int font, std::array<int, 4>* plate);

}  // namespace vlmd::serve::redact
