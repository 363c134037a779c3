// Scheduler: admission, batched decode steps and completion of jobs (see scheduler.h).
#include "serve/hosting/scheduler.h"

#include <algorithm>
#include <functional>
#include <new>
#include <string_view>

#include <spdlog/spdlog.h>

namespace vlmd::serve {
namespace {

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// An image's key in the visual-embedding cache: its own key within the job's tenant (the tenant
// length-prefixed, so that no tenant and key pair reads as another).
std::string CacheKey(const JobInput& in, const std::string& image_key) {
  if (in.tenant.empty()) return image_key;
  return std::to_string(in.tenant.size()) + ":" + in.tenant + image_key;
}

// Identity of each prompt row for prefix matching: a text row is its token id; an image row is
// a hash of its image's cache key (pixels + preprocessing) and its index in the image, with the
// top bit set so that it never equals a token id.
std::vector<uint64_t> RowIds(const engine::runtime::PromptRows& rows,
                             const std::vector<std::string_view>& keys,
                             const std::vector<engine::runtime::EncodedImage>& encoded,
                             int64_t n_embd) {
  std::vector<uint64_t> ids;
  ids.reserve(rows.tokens.size());
  size_t image = 0;
  int64_t row_in_image = 0;
  uint64_t image_hash = keys.empty() ? 0 : std::hash<std::string_view>{}(keys[0]);
  for (int32_t t : rows.tokens) {
    if (t >= 0) {
      ids.push_back(static_cast<uint64_t>(t));
      continue;
    }
    while (image < encoded.size() &&
           row_in_image * n_embd >= static_cast<int64_t>(encoded[image].embeddings.size())) {
      ++image;
      row_in_image = 0;
      image_hash = image < keys.size() ? std::hash<std::string_view>{}(keys[image]) : 0;
    }
    ids.push_back((1ull << 63) | ((image_hash * 0x9E3779B97F4A7C15ull) ^ static_cast<uint64_t>(row_in_image)));
    ++row_in_image;
  }
  return ids;
}

}  // namespace

Scheduler::Scheduler(engine::runtime::VlmEngine* engine, ImageCache* cache, ServerMetrics* metrics,
                     SchedulerOptions options)
    : engine_(engine),
      cache_(cache),
      metrics_(metrics),
      options_(options),
      queue_depth_share_(metrics->queue_depth.With()),
      batch_share_(metrics->batch_size.With()),
      weights_share_(metrics->memory_bytes.With({"weights"})),
      kv_share_(metrics->memory_bytes.With({"kv"})),
      image_cache_share_(metrics->memory_bytes.With({"image_cache"})),
      activations_share_(metrics->memory_bytes.With({"activations"})) {
  // Mapped model files plus packed copies, text and vision (weight_bytes() is what one token
  // reads, a bandwidth figure, not a memory one).
  uint64_t weights = engine_->model().memory_bytes();
  if (engine_->vision() != nullptr) weights += engine_->vision()->memory_bytes();
  weights_share_.Set(static_cast<double>(weights));
  thread_ = std::thread([this] { Run(); });
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Shutdown() {
  std::lock_guard<std::mutex> one_caller(shutdown_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable()) return;  // already shut down
  thread_.join();
  // The thread is gone: the active slots are this caller's; Submit queues nothing more (stop_).
  std::deque<std::shared_ptr<Job>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queue_);
  }
  for (auto& job : queued) job->Fail(Status(StatusCode::kUnavailable, "server shutting down"));
  for (auto& slot : active_) slot.job->Fail(Status(StatusCode::kUnavailable, "server shutting down"));
  active_.clear();
}

Status Scheduler::Submit(std::shared_ptr<Job> job) {
  const auto now = Clock::now();
  std::vector<std::shared_ptr<Job>> dead;
  Status status = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "server shutting down");
    dead = WithdrawDeadLocked(now);  // their slots are free for this one
    if (static_cast<int32_t>(queue_.size()) >= options_.queue_size) {
      status = ResourceExhaustedError("queue full (" + std::to_string(options_.queue_size) +
                                      " requests waiting); retry later");
    } else {
      queue_.push_back(std::move(job));
    }
    queue_depth_share_.Set(static_cast<double>(queue_.size()));
  }
  for (auto& j : dead) FailUnstarted(*j, now);
  if (status.ok()) cv_.notify_one();
  return status;
}

std::vector<std::shared_ptr<Job>> Scheduler::WithdrawDeadLocked(Clock::time_point now) {
  std::vector<std::shared_ptr<Job>> dead;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancelled() || now > (*it)->input().deadline) {
      dead.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return dead;
}

bool Scheduler::FailUnstarted(Job& job, Clock::time_point now) {
  if (job.cancelled()) {
    job.Fail(Status(StatusCode::kCancelled, "client went away before the job started"));
    return true;
  }
  if (now > job.input().deadline) {
    job.Fail(Status(StatusCode::kDeadlineExceeded, "request deadline exceeded in the queue"));
    return true;
  }
  return false;
}

size_t Scheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Scheduler::EncodeSome() {
  int64_t budget = std::max<int64_t>(options_.encode_tiles, 1);
  for (Slot& slot : active_) {  // oldest first: admission order
    if (slot.seq || slot.failed) continue;
    const JobInput& in = slot.job->input();
    Status s = Status::Ok();
    while (slot.next_image < in.images.size()) {
      const engine::runtime::PreparedImage& img = in.images[slot.next_image];
      if (!slot.encoding) {
        // Looked up at every step until its encoding starts (an image another job encoded
        // meanwhile hits), counted once: as a hit, or as a miss when the encoding starts.
        if (ImageCache::Entry entry = cache_->Lookup(CacheKey(in, img.key))) {
          metrics_->embedding_cache_queries.With().Inc();
          metrics_->embedding_cache_hits.With().Inc();
          ++slot.cache_hits;
          slot.encoded.push_back(*entry);  // BuildPrompt copies rows anyway
          slot.result.encoded_images.push_back(entry);
          slot.job->ReleaseImagePixels(slot.next_image);
          ++slot.next_image;
          continue;
        }
      }
      if (budget <= 0) break;  // this step's share of encoder time is spent
      if (!slot.encoding) {
        metrics_->embedding_cache_queries.With().Inc();
        auto begun = engine_->BeginEncode(img);
        if (!begun.ok()) {
          s = begun.status();
          metrics_->embedding_failures.With().Inc();
          break;
        }
        slot.encoding = std::move(*begun);
      }
      const int64_t n =
          std::min(budget, slot.encoding->total_units() - slot.encoding->done_units());
      const auto t0 = Clock::now();
      s = engine_->EncodeUnits(slot.encoding.get(), n);
      const auto t1 = Clock::now();
      if (slot.result.encode_start == Clock::time_point{}) slot.result.encode_start = t0;
      slot.result.encode_end = t1;
      const double ms = MsBetween(t0, t1);
      slot.result.encode_ms += ms;
      slot.image_encode_ms += ms;
      budget -= n;
      if (!s.ok()) {
        metrics_->embedding_failures.With().Inc();
        break;
      }
      if (!slot.encoding->done()) continue;
      const size_t i = slot.next_image;
      const double prepare_ms = i < in.image_prepare_ms.size() ? in.image_prepare_ms[i] : 0.0;
      metrics_->embedding_success.With().Inc();
      metrics_->embedding_duration.With().Observe((slot.image_encode_ms + prepare_ms) / 1000.0);
      auto entry = std::make_shared<const engine::runtime::EncodedImage>(
          engine_->EncodedFrom(img, slot.encoding.get()));
      cache_->Insert(CacheKey(in, img.key), entry, in.tenant);
      slot.encoded.push_back(*entry);
      slot.result.encoded_images.push_back(entry);
      slot.encoding.reset();
      slot.job->ReleaseImagePixels(i);
      slot.image_encode_ms = 0;
      ++slot.next_image;
    }
    if (s.ok() && slot.next_image == in.images.size()) s = StartSequence(&slot);
    if (!s.ok()) {
      slot.job->Fail(std::move(s));
      slot.failed = true;
    }
  }
}

Status Scheduler::StartSequence(Slot* slot) {
  const JobInput& in = slot->job->input();
  JobResult& r = slot->result;
  // A stream's earlier frames first, then the job's own images, in marker order.
  std::vector<engine::runtime::EncodedImage> encoded;
  std::vector<std::string_view> keys;
  encoded.reserve(in.context.size() + slot->encoded.size());
  for (const ContextFrame& f : in.context) {
    encoded.push_back(*f.encoded);
    keys.push_back(f.key);
  }
  for (auto& e : slot->encoded) encoded.push_back(std::move(e));
  slot->encoded.clear();
  for (const auto& img : in.images) keys.push_back(img.key);
  r.image_cache_hit = !in.images.empty() && slot->cache_hits == static_cast<int>(in.images.size());
  VLMD_ASSIGN_OR_RETURN(engine::runtime::PromptRows rows,
                        engine_->BuildPrompt(in.prompt, encoded, /*raw=*/true));
  r.prompt_tokens = static_cast<int64_t>(rows.tokens.size());
  r.image_tokens = rows.n_image_tokens;
  // An image row is n_embd_inp() floats wide (Qwen3-VL: with its deepstack features).
  slot->row_ids = RowIds(rows, keys, encoded, engine_->model().config().n_embd_inp());
  // Prefix reuse: the parked cache sharing the longest prefix with this prompt (at most all but
  // the last row, which is computed for its logits).
  const Parked* best = nullptr;
  size_t best_len = 0;
  for (const Parked& p : parked_) {
    if (slot->row_ids.empty()) break;  // an empty prompt: StartSequence reports it
    if (p.tenant != in.tenant) continue;  // another client's prompt: never reused, never probed
    const size_t limit = std::min(p.row_ids.size(), slot->row_ids.size() - 1);
    size_t n = 0;
    while (n < limit && p.row_ids[n] == slot->row_ids[n]) ++n;
    if (n > best_len) {
      best_len = n;
      best = &p;
    }
  }
  if (best_len < static_cast<size_t>(std::max(options_.min_prefix_rows, 1))) best = nullptr;
  // Only the prefix copy happens here: the prompt rows are computed chunk by chunk between
  // decode steps (Run), so a long prompt does not stall the sequences already decoding.
  const auto t0 = Clock::now();
  VLMD_ASSIGN_OR_RETURN(slot->seq, engine_->BeginSequence(std::move(rows), in.params,
                                                          best ? best->seq->cache() : nullptr,
                                                          best ? static_cast<int32_t>(best_len) : 0));
  // What was really reused: the engine keeps whole images and intact sliding windows only.
  const int64_t reused = r.prompt_tokens - slot->seq->prefill_rows_left();
  if (best != nullptr && reused > 0) {
    r.reused_prompt_tokens = reused;
    metrics_->prefix_reused_tokens.With().Inc(static_cast<double>(reused));
  }
  slot->decode_start = Clock::now();  // moved to the end of the prefill by PrefillSome
  r.prefill_start = t0;
  r.prefill_ms = MsBetween(t0, slot->decode_start);
  metrics_->prompt_tokens.With().Inc(static_cast<double>(r.prompt_tokens));
  return Status::Ok();
}

void Scheduler::PrefillSome() {
  int64_t budget = std::max<int64_t>(options_.prefill_chunk, 1);
  for (Slot& slot : active_) {  // oldest first: admission order
    if (budget <= 0) break;
    if (!slot.seq || slot.failed) continue;
    engine::runtime::Sequence& seq = *slot.seq;
    if (!seq.prefilling() || seq.finished()) continue;
    const int64_t left = seq.prefill_rows_left();
    const int64_t rows = std::min(budget, left);
    const auto t0 = Clock::now();
    Status s = engine_->PrefillChunk(&seq, rows);
    const auto t1 = Clock::now();
    slot.result.prefill_ms += MsBetween(t0, t1);
    // The rows computed: a chunk may stop before an image that attends both ways, or take all
    // of one that starts it (Gemma 3), so not always `rows`.
    budget -= s.ok() && seq.prefilling() ? left - seq.prefill_rows_left() : rows;
    if (!s.ok()) {
      seq.Fail(std::move(s));  // Publish fails the job; its neighbours go on
    } else if (!seq.prefilling()) {
      slot.decode_start = t1;
    }
  }
}

bool Scheduler::Publish(Slot* slot) {
  if (slot->failed) return true;  // its job has its error already
  if (!slot->seq) {               // still encoding its images
    if (slot->job->cancelled()) {
      slot->job->Fail(Status(StatusCode::kCancelled, "client went away while its images were encoded"));
      return true;
    }
    if (Clock::now() > slot->job->input().deadline) {
      slot->job->Fail(Status(StatusCode::kDeadlineExceeded,
                             "request deadline exceeded while encoding its images"));
      return true;
    }
    return false;
  }
  engine::runtime::Sequence& seq = *slot->seq;
  if (!seq.finished()) {
    if (slot->job->cancelled()) {
      seq.Finish("cancelled");
    } else if (Clock::now() > slot->job->input().deadline) {
      seq.Finish("deadline");
    }
  }
  std::vector<StreamedToken> released;
  if (slot->job->input().stream_tokens) {
    const size_t n = std::min(seq.released_tokens(), seq.token_stats().size());
    for (; slot->tokens_streamed < n; ++slot->tokens_streamed) {
      released.push_back({seq.tokens()[slot->tokens_streamed], seq.token_stats()[slot->tokens_streamed]});
    }
  }
  slot->job->PushText(seq.TakeNewText(), std::move(released));
  if (!seq.finished()) return false;
  JobResult& r = slot->result;
  r.tokens = seq.tokens();
  r.text = seq.text();
  r.finish_reason = seq.finish_reason();
  r.token_stats = seq.token_stats();
  r.text_tokens = seq.text_tokens();
  r.decode_start = slot->decode_start;
  r.decode_end = Clock::now();
  r.decode_ms = MsBetween(r.decode_start, r.decode_end);
  metrics_->generated_tokens.With().Inc(static_cast<double>(r.tokens.size()));
  const bool failed = r.finish_reason == "error";
  if (failed) {
    slot->job->Fail(seq.error());  // this sequence's numbers went bad; its batch neighbours go on
  } else if (r.finish_reason == "deadline") {
    slot->job->Fail(Status(StatusCode::kDeadlineExceeded,
                           "request deadline exceeded after " + std::to_string(r.tokens.size()) +
                               " tokens"));
  } else {
    slot->job->Complete(std::move(r));
  }
  if (!failed) Park(slot);  // a failed cache may hold non-finite K/V
  return true;
}

void Scheduler::Park(Slot* slot) {
  if (options_.prefix_cache_entries <= 0 || !slot->seq) return;
  // The cache holds the prompt rows, then every generated token that was fed back; only the
  // prompt rows are offered for reuse. The others were computed by decode steps, whose kernels
  // differ from a prompt's in the low bits (text_decoder.h, ForwardBatch::prompt): a follow-up
  // that reused them would answer otherwise than the same request on a fresh server. So a
  // follow-up computes the previous reply again, as prompt rows (prefill runs several times
  // faster per token than decode).
  const int32_t filled = slot->seq->cache()->n_filled();
  std::vector<uint64_t> ids = std::move(slot->row_ids);
  // A sequence cancelled while prefilling holds the first `filled` prompt rows: still reusable.
  if (static_cast<int32_t>(ids.size()) > filled) ids.resize(static_cast<size_t>(filled));
  if (ids.empty()) return;
  parked_.push_front(Parked{slot->job->input().tenant, std::move(ids), std::move(slot->seq)});
  while (static_cast<int32_t>(parked_.size()) > options_.prefix_cache_entries) parked_.pop_back();
}

void Scheduler::UpdateMemoryGauges() {
  double kv = 0;
  for (const Slot& s : active_) {
    if (s.seq) kv += static_cast<double>(s.seq->cache()->bytes());
  }
  for (const Parked& p : parked_) kv += static_cast<double>(p.seq->cache()->bytes());
  kv_share_.Set(kv);
  image_cache_share_.Set(static_cast<double>(cache_->bytes()));
  activations_share_.Set(static_cast<double>(engine_->activation_bytes()));
}

void Scheduler::Run() {
  std::vector<engine::runtime::Sequence*> batch;
  while (true) {
    std::vector<std::shared_ptr<Job>> admit, dead;  // taken from the queue for this step
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !active_.empty(); });
      if (stop_) return;
      dead = WithdrawDeadLocked(Clock::now());
      while (!queue_.empty() && static_cast<int32_t>(active_.size() + admit.size()) < options_.max_batch) {
        admit.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queue_depth_share_.Set(static_cast<double>(queue_.size()));
    }
    try {
      Step(dead, admit, batch);
    } catch (const std::bad_alloc&) {
      AbandonStep(dead, admit, Status(StatusCode::kUnavailable,
                                      "the server ran out of memory while running this request; retry later"));
    } catch (const std::exception& e) {
      AbandonStep(dead, admit, InternalError(std::string("the scheduler's step failed: ") + e.what()));
    }
  }
}

void Scheduler::AbandonStep(const std::vector<std::shared_ptr<Job>>& dead,
                            const std::vector<std::shared_ptr<Job>>& admit, const Status& status) {
  spdlog::error("scheduler: a step threw; its {} running and {} admitted jobs fail: {}", active_.size(),
                admit.size(), status.message());
  // Job::Fail keeps the first outcome: the jobs already answered in this step are not changed.
  for (const auto& job : dead) job->Fail(status);
  for (const auto& job : admit) job->Fail(status);
  // (A throw inside erase_if's Publish leaves moved-from slots behind: no job.)
  for (Slot& slot : active_) {
    if (slot.job) slot.job->Fail(status);
  }
  active_.clear();  // their sequences and caches go with them
  parked_.clear();  // and the parked caches: memory, should that be what ran out
  batch_share_.Set(0.0);
  UpdateMemoryGauges();
}

void Scheduler::Step(const std::vector<std::shared_ptr<Job>>& dead, const std::vector<std::shared_ptr<Job>>& admit,
                     std::vector<engine::runtime::Sequence*>& batch) {
  for (auto& job : dead) FailUnstarted(*job, Clock::now());
  for (auto& job : admit) {
    const auto now = Clock::now();
    if (FailUnstarted(*job, now)) continue;
    Slot slot;
    slot.job = job;
    slot.result.queue_ms = MsBetween(job->submitted(), now);
    if (job->input().images.empty()) {  // else EncodeSome starts it once its images are in
      if (Status s = StartSequence(&slot); !s.ok()) {
        job->Fail(std::move(s));
        continue;
      }
    }
    if (!Publish(&slot)) active_.push_back(std::move(slot));
  }
  UpdateMemoryGauges();
  if (active_.empty()) return;
  // One step: a share of image encoding, a share of prompt prefill, one token for every
  // sequence past both. The shares bound how long the decoding sequences wait per token.
  EncodeSome();
  PrefillSome();
  batch.clear();
  for (Slot& s : active_) {
    if (s.seq && !s.failed && !s.seq->prefilling() && !s.seq->finished()) {
      batch.push_back(s.seq.get());
    }
  }
  batch_share_.Set(static_cast<double>(batch.size()));
  Status s = Status::Ok();
  if (!batch.empty()) {
    metrics_->decode_steps.With().Inc();
    s = engine_->DecodeStep(batch);
  }
  // Not a numerical failure (those end only their own sequence, in Publish): when the step itself
  // could not run, every sequence in it ends with the error. The others are published as after
  // any step (all of them used to get the error): one that finished in this step's prefill gets
  // its answer, one still encoding or prefilling its next turn, one failed on its own its error.
  std::erase_if(active_, [&](Slot& slot) {
    if (!s.ok() && slot.seq && std::find(batch.begin(), batch.end(), slot.seq.get()) != batch.end()) {
      slot.job->Fail(s);
      return true;
    }
    return Publish(&slot);
  });
  if (active_.empty()) {  // idle now: else the gauges keep this step's values until the next job
    batch_share_.Set(0.0);
    UpdateMemoryGauges();
  }
}

}  // namespace vlmd::serve
