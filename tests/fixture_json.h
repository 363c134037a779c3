// Reading a fixture's JSON (golden.json, MANIFEST.json) without exceptions: a missing or broken
// file is an error message that names the path, for the caller to ASSERT on.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace vlmd::testing {

// Parses tests/fixtures/`relative`. On failure returns null and sets *error to a message naming
// the file; on success leaves *error empty.
inline nlohmann::json ReadFixtureJson(const std::string& relative, std::string* error) {
  const std::string path = FixturePath(relative);
  error->clear();
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read fixture file " + path;
    return nullptr;
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *error = "fixture file is not valid JSON: " + path;
    return nullptr;
  }
  return j;
}

}  // namespace vlmd::testing
