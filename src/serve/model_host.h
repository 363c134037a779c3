// One served model: the engine (text + optional mmproj), its identity (name, SHA-256 of the
// files), the visual-embedding cache and the scheduler thread that owns the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/runtime/text_engine.h"
#include "serve/image_cache.h"
#include "serve/scheduler.h"
#include "serve/server_metrics.h"

namespace vlmd::serve {

struct ModelSpec {
  std::string name;          // served model id (/v1/models, "model" in requests)
  std::string version;       // release label in replies and metrics ("" : the hash's first 12)
  bool version_from_hash = false;  // set by Load when `version` was derived from the hash
  std::string text_path;
  std::string mmproj_path;   // empty: text only
  bool demo = false;         // random-weight demo model: said in the log and in /v1/models
  engine::runtime::EngineOptions engine;
  SchedulerOptions scheduler;
  uint64_t image_cache_bytes = 256ull << 20;
};

class ModelHost {
 public:
  // Loads and validates the files, hashes them, starts the scheduler. Errors from the loaders.
  static Result<std::unique_ptr<ModelHost>> Load(const ModelSpec& spec, ServerMetrics* metrics);

  const ModelSpec& spec() const { return spec_; }
  const std::string& hash() const { return hash_; }  // hex SHA-256 over text then mmproj bytes
  // Const engine queries (tokenizer, templates, image preparation) are safe from any thread;
  // everything else belongs to the scheduler thread.
  const engine::runtime::TextEngine& engine() const { return *engine_; }
  Scheduler& scheduler() { return *scheduler_; }

 private:
  ModelHost() = default;
  ModelSpec spec_;
  std::string hash_;
  std::unique_ptr<engine::runtime::TextEngine> engine_;
  std::unique_ptr<ImageCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;  // declared last: stops first
};

// SHA-256 over the concatenated bytes of `paths` (read in chunks). NOT_FOUND when unreadable.
Result<std::string> HashFiles(const std::vector<std::string>& paths);

}  // namespace vlmd::serve
