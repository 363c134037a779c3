// ModelHost: load, hash and start one served model (see model_host.h).
#include "serve/hosting/model_host.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace vlmd::serve {

namespace {

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

}  // namespace

uint64_t MemoryPlan::total() const { return SaturatingAdd(SaturatingAdd(weights, kv), image_cache); }

std::string MemoryPlan::ToString(int32_t n_ctx) const {
  return std::to_string(CeilMiB(total())) + " MiB (weights " + std::to_string(CeilMiB(weights)) +
         ", K/V " + std::to_string(CeilMiB(kv)) + " for " + std::to_string(kv_sequences) +
         " sequences of " + std::to_string(n_ctx) + " positions, image cache " +
         std::to_string(CeilMiB(image_cache)) + ")";
}

Result<std::unique_ptr<ModelHost>> ModelHost::Load(const ModelSpec& spec, ServerMetrics* metrics,
                                                   uint64_t max_packed_bytes) {
  if (spec.scheduler.max_batch < 1 || spec.scheduler.queue_size < 1 ||
      spec.scheduler.prefill_chunk < 1 || spec.scheduler.encode_tiles < 1) {
    return InvalidArgumentError("max batch, queue size, prefill chunk and encode tiles must be >= 1");
  }
  std::unique_ptr<ModelHost> h(new ModelHost());
  h->spec_ = spec;
  engine::runtime::EngineOptions eo = spec.engine;
  eo.mmproj_path = spec.mmproj_path;
  eo.hash_files = true;  // model_hash: the plaintexts' SHA-256, sealed or not
  eo.max_packed_bytes = max_packed_bytes;
  eo.max_packed_bytes_hint =
      "A load may take what the memory budget leaves beside the loaded models, the stream windows and "
      "its image cache: raise --memory-budget-mb, or lower --image-cache-mb or streams.max_mb";
  VLMD_ASSIGN_OR_RETURN(h->engine_, engine::runtime::VlmEngine::Load(spec.text_path, eo));
  h->hash_ = h->engine_->files_sha256();
  h->spec_.version_from_hash = h->spec_.version.empty();
  if (h->spec_.version_from_hash) h->spec_.version = h->hash_.substr(0, 12);
  MemoryPlan& plan = h->memory_plan_;
  plan.weights = h->engine_->model().memory_bytes();
  if (h->engine_->vision() != nullptr) plan.weights += h->engine_->vision()->memory_bytes();
  plan.kv_sequences = int64_t{spec.scheduler.max_batch} + std::max(spec.scheduler.prefix_cache_entries, 0);
  // Sliding-window layers keep rings of window + n_batch rows (images up to n_batch rows).
  plan.kv_per_sequence = h->engine_->model().KvCacheBytes(spec.engine.n_ctx, spec.engine.n_batch);
  plan.kv = SaturatingMul(static_cast<uint64_t>(plan.kv_sequences), plan.kv_per_sequence);
  plan.image_cache = spec.image_cache_bytes;
  h->cache_ = std::make_unique<ImageCache>(spec.image_cache_bytes);
  h->scheduler_ = std::make_unique<Scheduler>(h->engine_.get(), h->cache_.get(), metrics, spec.scheduler);
  return h;
}

}  // namespace vlmd::serve
