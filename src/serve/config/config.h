// The vlmd config file (`vlmd --config vlmd.json`): server limits, several models, routes
// (complexity tiers, weighted canary splits), security (API keys, admin key, image allowlist,
// output word filter), audit log and trust signals. The README has a full example. Parsing is
// strict: an unknown key is an error (a typo must not silently disable a guard rail).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "serve/config/server_options.h"
#include "serve/hosting/model_host.h"
#include "serve/policy/complexity.h"

namespace vlmd::serve {

struct RouteTarget {
  std::string model;   // a model name from "models"
  double weight = 0;   // >= 0; the weights of a split need not sum to 100
};

// A named entry point clients put in "model": either a weighted split between model versions
// (gray release, sticky per client key) or complexity tiers (light / balanced / robust).
struct RouteConfig {
  std::string name;
  std::vector<RouteTarget> split;               // non-empty: a split route
  std::array<std::string, 3> tiers;             // light, balanced, robust (tier routes)
  policy::TierThresholds thresholds;
  policy::ComplexityWeights weights;
  // Redaction for requests that name this route, replacing the target model's and the
  // server-wide one; unset: those apply.
  std::optional<redact::RedactOptions> redact;
  bool is_split() const { return !split.empty(); }
};

struct VlmdConfig {
  ServerOptions server;               // includes the guard-rail settings (server.guard)
  std::vector<ModelSpec> models;      // loaded in order; empty: the command line's -m (or demo)
  std::vector<RouteConfig> routes;
  std::string default_model;          // model or route used when a request names none
};

// Parses `doc` (the file's text) over `defaults` (command-line values). Relative paths are
// resolved against `base_dir`. INVALID_ARGUMENT naming the key for any error.
Result<VlmdConfig> ParseConfig(std::string_view doc, const std::string& base_dir,
                               VlmdConfig defaults);
// Reads and parses the file; NOT_FOUND when unreadable.
Result<VlmdConfig> LoadConfigFile(const std::string& path, VlmdConfig defaults);

}  // namespace vlmd::serve
