// Shared helpers for the test suites: locating fixtures and comparing float arrays.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vlmd::testing {

// Absolute path of a file under the project root (tests run from it; VLMD_SOURCE_DIR overrides).
std::string SourcePath(const std::string& relative);
// Path of a file under tests/fixtures (the repository's copy of ../shared/fixtures, made by
// scripts/copy_fixtures.sh), e.g. FixturePath("tiny-llava/text.gguf").
std::string FixturePath(const std::string& relative);
// Reads a whole file; empty vector if it cannot be read.
std::vector<uint8_t> ReadFileBytes(const std::string& path);
// Reads raw little-endian float32 values.
std::vector<float> ReadF32File(const std::string& path);
// Normalized mean squared error sum((x-ref)^2)/sum(ref^2), in double.
double Nmse(std::span<const float> x, std::span<const float> ref);

}  // namespace vlmd::testing
