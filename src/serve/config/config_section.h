// Internal to the config parser (config.cpp and its sections' files): one JSON object section
// read strictly (unknown keys and wrong types are errors naming the key), and path resolution.
#pragma once

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "core/status.h"
#include "serve/config/server_options.h"
#include "serve/redact/redactor.h"

namespace vlmd::serve::internal {

using nlohmann::json;

// Reads one JSON object section, refusing keys it does not know (typos) and wrong types.
class Section {
 public:
  Section(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status CheckObject(const std::set<std::string>& known) const {
    if (!j_.is_object()) return InvalidArgumentError(where_ + ": expected an object");
    for (const auto& [k, v] : j_.items()) {
      if (!known.count(k)) return InvalidArgumentError(where_ + ": unknown key '" + k + "'");
    }
    return Status::Ok();
  }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& at(const char* key) const { return j_[key]; }
  std::string path(const char* key) const { return where_ + "." + key; }

  template <typename T>
  Status Get(const char* key, T* out) const {
    if (!has(key)) return Status::Ok();
    const json& v = j_[key];
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return InvalidArgumentError(path(key) + ": expected true or false");
    } else if constexpr (std::is_arithmetic_v<T>) {
      if (!v.is_number()) return InvalidArgumentError(path(key) + ": expected a number");
      if constexpr (std::is_integral_v<T>) {
        if (!v.is_number_integer()) return InvalidArgumentError(path(key) + ": expected an integer");
        // Range-check before converting: get<T> would silently wrap a large value.
        if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(std::numeric_limits<T>::max())
                                   : (v.get<int64_t>() < int64_t(std::numeric_limits<T>::min()) ||
                                      (v.get<int64_t>() > 0 && uint64_t(v.get<int64_t>()) >
                                                                   uint64_t(std::numeric_limits<T>::max())))) {
          return InvalidArgumentError(path(key) + ": out of range");
        }
      } else if (!std::isfinite(v.get<double>())) {
        return InvalidArgumentError(path(key) + ": expected a finite number");
      }
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) return InvalidArgumentError(path(key) + ": expected a string");
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!v.is_array()) return InvalidArgumentError(path(key) + ": expected an array of strings");
      for (const json& e : v) {
        if (!e.is_string()) return InvalidArgumentError(path(key) + ": expected an array of strings");
      }
    }
    *out = v.get<T>();
    return Status::Ok();
  }
  // Non-negative number.
  template <typename T>
  Status GetNonNegative(const char* key, T* out) const {
    T v = *out;
    VLMD_RETURN_IF_ERROR(Get(key, &v));
    if (v < 0) return InvalidArgumentError(path(key) + ": must be >= 0");
    *out = v;
    return Status::Ok();
  }
  // A number in [low, high] (the command line's range for the same setting, where it has one):
  // a size in MiB shifted to bytes, a thread count or a timeout added to a clock must not wrap.
  template <typename T>
  Status GetInRange(const char* key, T* out, T low, T high) const {
    T v = *out;
    VLMD_RETURN_IF_ERROR(Get(key, &v));
    if (has(key) && (v < low || v > high)) {
      return InvalidArgumentError(path(key) + ": must be " + std::to_string(low) + " to " +
                                  std::to_string(high));
    }
    *out = v;
    return Status::Ok();
  }

 private:
  const json& j_;
  std::string where_;
};

// `p` relative to `base_dir` (absolute and empty paths as they are).
inline std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute() || base_dir.empty()) return p;
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

// The "drift" section (drift alarms).
Status ParseDrift(const Section& s, const std::string& base_dir, DriftOptions* d);
// A "redact" object (redaction before inference): kinds, style, min_score, face_detector,
// cascade_dir; the detectors are loaded once to check them.
Status ParseRedact(const Section& s, const std::string& base_dir, redact::RedactOptions* r);

}  // namespace vlmd::serve::internal
