// Shared helpers for the test suites.
#include "test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace vlmd::testing {

std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("VLMD_SOURCE_DIR");
  // Absolute without the variable (the admin API takes absolute model paths only); ctest sets
  // it to the absolute source folder.
  std::string base = root ? root : std::filesystem::current_path().string();
  return base + "/" + relative;
}

std::string FixturePath(const std::string& relative) {
  return SourcePath("tests/fixtures/" + relative);
}

std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<float> ReadF32File(const std::string& path) {
  std::vector<uint8_t> bytes = ReadFileBytes(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = uint32_t(bytes[4 * i]) | uint32_t(bytes[4 * i + 1]) << 8 |
                 uint32_t(bytes[4 * i + 2]) << 16 | uint32_t(bytes[4 * i + 3]) << 24;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

double Nmse(std::span<const float> x, std::span<const float> ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < x.size(); ++i) {
    double d = double(x[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (x.size() != ref.size()) return 1e30;
  return den > 0 ? num / den : num;
}

}  // namespace vlmd::testing
