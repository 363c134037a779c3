// One served model: the engine (text + optional mmproj), its identity (name, SHA-256 of the
// files), the visual-embedding cache and the scheduler thread that owns the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/byte_counts.h"
#include "core/status.h"
#include "engine/runtime/vlm_engine.h"
#include "serve/hosting/image_cache.h"
#include "serve/hosting/scheduler.h"
#include "serve/redact/redactor.h"
#include "serve/obs/server_metrics.h"

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
  // This model's redaction (config "models[].redact"), replacing the server-wide one; unset:
  // the server-wide one applies.
  std::optional<redact::RedactOptions> redact;
};

// The most memory a served model holds (SPEC S9), known once it is loaded: its weights (the
// mapped files less the pages packed copies replaced, plus those copies), the K/V caches of a full
// batch and of the parked prompt prefixes at the full context, and its visual-embedding cache's
// limit. Not in it: the forward pass's activations and scratch (the encoder's ~1024-row buffers,
// the prefill attention's), which /metrics reports as they are allocated. Sums saturate
// (SaturatingAdd, core/byte_counts.h).
struct MemoryPlan {
  uint64_t weights = 0;
  uint64_t kv = 0;           // kv_sequences x kv_per_sequence
  int64_t kv_sequences = 0;  // max batch + parked prefixes
  uint64_t kv_per_sequence = 0;
  uint64_t image_cache = 0;
  // The sum, saturating: absurd settings must not wrap around into a plan that fits.
  uint64_t total() const;
  // "N MiB (weights W, K/V K for S sequences of C positions, image cache I)"
  std::string ToString(int32_t n_ctx) const;
};

class ModelHost {
 public:
  // Loads and validates the files, hashes them, starts the scheduler. Errors from the loaders;
  // RESOURCE_EXHAUSTED as soon as the packed weights would pass `max_packed_bytes` (what the
  // server's memory budget leaves: Server::MemoryLeftForLoad).
  static Result<std::unique_ptr<ModelHost>> Load(const ModelSpec& spec, ServerMetrics* metrics,
                                                 uint64_t max_packed_bytes = UINT64_MAX);

  const ModelSpec& spec() const { return spec_; }
  const std::string& hash() const { return hash_; }  // hex SHA-256 over text then mmproj bytes
  const MemoryPlan& memory_plan() const { return memory_plan_; }
  // Const engine queries (tokenizer, templates, image preparation) are safe from any thread;
  // everything else belongs to the scheduler thread.
  const engine::runtime::VlmEngine& engine() const { return *engine_; }
  // A sealed model's files were decrypted into memory; whether all of it is locked (mlock).
  bool decrypted() const { return engine_->decrypted(); }
  bool decrypted_locked() const { return engine_->decrypted_locked(); }
  Scheduler& scheduler() { return *scheduler_; }

 private:
  ModelHost() = default;
  ModelSpec spec_;
  std::string hash_;
  MemoryPlan memory_plan_;
  std::unique_ptr<engine::runtime::VlmEngine> engine_;
  std::unique_ptr<ImageCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;  // declared last: stops first
};

}  // namespace vlmd::serve
