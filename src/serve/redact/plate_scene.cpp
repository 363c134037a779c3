// Drawn number-plate scenes (see plate_scene.h).
#include "serve/redact/plate_scene.h"

#include <algorithm>
#include <opencv2/imgproc.hpp>

namespace vlmd::serve::redact {

engine::image::Image PlateScene(int width, const char* text, int font, std::array<int, 4>* plate) {
  width = std::clamp(width, 40, 600);
  cv::Mat bgr(480, 640, CV_8UC3, cv::Scalar(90, 90, 90));
  cv::rectangle(bgr, cv::Rect(100, 150, 440, 260), cv::Scalar(40, 40, 120), cv::FILLED);
  const int height = width * 112 / 520;
  const cv::Rect box(320 - width / 2, 330 - height / 2, width, height);
  *plate = {box.x, box.y, box.width, box.height};
  cv::rectangle(bgr, box, cv::Scalar(235, 235, 235), cv::FILLED);
  cv::rectangle(bgr, box, cv::Scalar(10, 10, 10), std::max(1, width / 100));
  // The largest text that fits 85% of the plate's width and 70% of its height.
  const int thickness = std::max(1, width / 70);
  double scale = 0.1;
  int base = 0;
  cv::Size size = cv::getTextSize(text, font, scale, thickness, &base);
  while (true) {
    const cv::Size next = cv::getTextSize(text, font, scale + 0.05, thickness, &base);
    if (next.width > width * 0.85 || next.height > height * 0.7) break;
    scale += 0.05;
    size = next;
  }
  cv::putText(bgr, text, cv::Point(box.x + (width - size.width) / 2, box.y + (height + size.height) / 2), font, scale,
              cv::Scalar(15, 15, 15), thickness, cv::LINE_AA);
  engine::image::Image img;
  img.width = bgr.cols;
  img.height = bgr.rows;
  img.rgb.resize(size_t(img.width) * size_t(img.height) * 3);
  cv::Mat rgb(img.height, img.width, CV_8UC3, img.rgb.data());
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  return img;
}

}  // namespace vlmd::serve::redact
