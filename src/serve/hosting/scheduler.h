// The scheduler (SPEC S4, S8): ONE thread owns the engine, the batch and every KV cache. Handlers
// only Submit() jobs and wait on them; the thread admits queued jobs into free batch slots, and
// each step runs at most `encode_tiles` image work units (a tile, or a Qwen VL ViT block; through
// the image cache), prefills at
// most `prefill_chunk` prompt rows (chunked prefill), then advances every prefilled sequence by
// one token in a single batched forward pass (continuous batching: jobs join and leave between
// steps). Cancelled jobs and expired deadlines end at the next step, also while their images
// are encoded or their prompt is prefilled.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/runtime/vlm_engine.h"
#include "serve/hosting/image_cache.h"
#include "serve/hosting/job.h"
#include "serve/obs/server_metrics.h"

namespace vlmd::serve {

struct SchedulerOptions {
  int32_t max_batch = 4;     // sequences decoded together
  int32_t queue_size = 64;   // jobs waiting for a slot; beyond: Submit fails (HTTP 429)
  // Finished sequences whose KV caches are kept for prefix reuse (least recently used dropped).
  int32_t prefix_cache_entries = 8;
  int32_t min_prefix_rows = 4;  // shorter common prefixes are recomputed
  // Prompt rows prefilled per scheduler step (chunked prefill): the sequences already decoding
  // wait at most this much prefill between two of their tokens.
  int32_t prefill_chunk = 256;
  // Image work units (tiles; Qwen VL: ViT blocks) encoded per scheduler step: a new image delays
  // the decoding sequences by about this many units' encoder time per token instead of by the
  // whole image at once.
  int32_t encode_tiles = 1;
};

class Scheduler {
 public:
  // `engine`, `cache` and `metrics` must outlive the scheduler. Starts the thread.
  Scheduler(engine::runtime::VlmEngine* engine, ImageCache* cache, ServerMetrics* metrics,
            SchedulerOptions options);
  // Stops the thread; jobs still queued or running fail with UNAVAILABLE.
  ~Scheduler();
  // The same, now (the destructor then has nothing left to do): a server past its drain timeout
  // answers the requests still in flight instead of waiting for them. Later Submits fail with
  // UNAVAILABLE. Thread-safe; idempotent.
  void Shutdown();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues `job`. RESOURCE_EXHAUSTED "queue full" when queue_size jobs already wait (the job is
  // not queued); UNAVAILABLE when stopping. Thread-safe.
  Status Submit(std::shared_ptr<Job> job);

  size_t queue_depth() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Slot {  // a running job (scheduler-thread state)
    std::shared_ptr<Job> job;
    // Image encoding, work unit by work unit (EncodeSome): images [0, next_image) are in
    // `encoded`; `encoding` holds the next one while it is under way.
    size_t next_image = 0;
    std::unique_ptr<engine::models::ImageEncoding> encoding;
    double image_encode_ms = 0;  // of the image being encoded
    int cache_hits = 0;
    std::vector<engine::runtime::EncodedImage> encoded;
    // Null until every image is encoded; then prefilled chunk by chunk (PrefillSome), then decoded.
    std::unique_ptr<engine::runtime::Sequence> seq;
    bool failed = false;  // its job failed already (encoding or start); dropped at Publish
    std::vector<uint64_t> row_ids;  // identity of each prompt row (see RowIds)
    JobResult result;
    Clock::time_point decode_start;
    size_t tokens_streamed = 0;  // tokens sent to the job (JobInput::stream_tokens)
  };
  // A finished sequence kept for prefix reuse: its cache holds K/V for the rows in row_ids (its
  // prompt rows; Park says why not the generated ones).
  struct Parked {
    std::string tenant;  // JobInput::tenant of the request it served
    std::vector<uint64_t> row_ids;
    std::unique_ptr<engine::runtime::Sequence> seq;
  };

  void Run();
  // One step of Run: fails `dead`, admits `admit`, then encodes, prefills and decodes a share.
  void Step(const std::vector<std::shared_ptr<Job>>& dead, const std::vector<std::shared_ptr<Job>>& admit,
            std::vector<engine::runtime::Sequence*>& batch);
  // A step threw (std::bad_alloc when memory ran out, or a defect): every job it held fails with
  // `status`, running and parked sequences are dropped, and Run goes on with the next jobs.
  // Without it the exception would end the process and every request in it without a reply.
  void AbandonStep(const std::vector<std::shared_ptr<Job>>& dead, const std::vector<std::shared_ptr<Job>>& admit,
                   const Status& status);
  // Queued jobs whose client went away or whose deadline passed, taken out of the queue (mu_
  // held): they would keep a --queue slot, and count in vlm_queue_depth, until admitted. The
  // caller fails them (FailUnstarted) once mu_ is released.
  std::vector<std::shared_ptr<Job>> WithdrawDeadLocked(Clock::time_point now);
  // Fails a job that never started: cancelled, or past its deadline at `now`; false (nothing
  // done) when it is neither.
  static bool FailUnstarted(Job& job, Clock::time_point now);
  // Runs up to options_.encode_tiles image work units of the slots still encoding, oldest first
  // (cache hits cost nothing), and starts the sequence of each slot whose images are all in.
  void EncodeSome();
  // Builds the slot's prompt rows and starts its sequence (prefix reuse; the prompt rows are
  // computed later by PrefillSome).
  Status StartSequence(Slot* slot);
  // Computes up to options_.prefill_chunk prompt rows of the prefilling sequences, oldest first.
  void PrefillSome();
  // Streams new text; completes the job when its sequence finished. Returns true when done.
  bool Publish(Slot* slot);
  void UpdateMemoryGauges();
  // Keeps a finished slot's cache for later prompts that extend it.
  void Park(Slot* slot);

  engine::runtime::VlmEngine* engine_;
  ImageCache* cache_;
  ServerMetrics* metrics_;
  const SchedulerOptions options_;

  std::mutex shutdown_mu_;  // Shutdown's callers, one at a time
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;

  // This scheduler's share of a gauge that sums over every scheduler alive (several models, and
  // the old and new version during a hot swap, serve at once): Set moves the gauge by the
  // difference; destruction takes the share back out.
  class GaugeShare {
   public:
    explicit GaugeShare(obs::Gauge& g) : gauge_(g) {}
    ~GaugeShare() { gauge_.Add(-last_); }
    GaugeShare(const GaugeShare&) = delete;
    GaugeShare& operator=(const GaugeShare&) = delete;
    void Set(double v) {
      gauge_.Add(v - last_);
      last_ = v;
    }

   private:
    obs::Gauge& gauge_;
    double last_ = 0;
  };
  GaugeShare queue_depth_share_;  // under mu_
  GaugeShare batch_share_, weights_share_, kv_share_, image_cache_share_, activations_share_;

  std::vector<Slot> active_;  // scheduler thread only
  std::deque<Parked> parked_;  // scheduler thread only; front = most recently used
  std::thread thread_;
};

}  // namespace vlmd::serve
