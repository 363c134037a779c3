// Scheduler: admission, batched decode steps and completion of jobs (see scheduler.h).
#include "serve/scheduler.h"

#include <algorithm>

namespace vlmd::serve {
namespace {

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Scheduler::Scheduler(engine::runtime::TextEngine* engine, ImageCache* cache, ServerMetrics* metrics,
                     SchedulerOptions options)
    : engine_(engine), cache_(cache), metrics_(metrics), options_(options) {
  metrics_->memory_bytes.With({"weights"}).Set(static_cast<double>(engine_->model().weight_bytes()));
  thread_ = std::thread([this] { Run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& job : queue_) job->Fail(Status(StatusCode::kUnavailable, "server shutting down"));
  for (auto& slot : active_) slot.job->Fail(Status(StatusCode::kUnavailable, "server shutting down"));
}

Status Scheduler::Submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "server shutting down");
    if (static_cast<int32_t>(queue_.size()) >= options_.queue_size) {
      return ResourceExhaustedError("queue full (" + std::to_string(options_.queue_size) +
                                    " requests waiting); retry later");
    }
    queue_.push_back(std::move(job));
    metrics_->queue_depth.With().Set(static_cast<double>(queue_.size()));
  }
  cv_.notify_one();
  return Status::Ok();
}

size_t Scheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

Status Scheduler::Admit(const std::shared_ptr<Job>& job, Slot* slot) {
  const JobInput& in = job->input();
  JobResult& r = slot->result;
  std::vector<engine::runtime::EncodedImage> encoded;
  encoded.reserve(in.images.size());
  int hits = 0;
  for (size_t i = 0; i < in.images.size(); ++i) {
    const engine::runtime::PreparedImage& img = in.images[i];
    const double prepare_ms = i < in.image_prepare_ms.size() ? in.image_prepare_ms[i] : 0.0;
    metrics_->embedding_cache_queries.With().Inc();
    ImageCache::Entry entry = cache_->Lookup(img.key);
    if (entry) {
      metrics_->embedding_cache_hits.With().Inc();
      ++hits;
    } else {
      engine::runtime::ImageTimings t;
      auto e = engine_->EncodePrepared(img, &t);
      if (!e.ok()) {
        metrics_->embedding_failures.With().Inc();
        return e.status();
      }
      r.encode_ms += t.encode_ms;
      metrics_->embedding_success.With().Inc();
      metrics_->embedding_duration.With().Observe((t.encode_ms + prepare_ms) / 1000.0);
      entry = std::make_shared<const engine::runtime::EncodedImage>(std::move(*e));
      cache_->Insert(img.key, entry);
    }
    encoded.push_back(*entry);  // BuildPrompt copies rows anyway; the entry stays shared
  }
  r.image_cache_hit = !in.images.empty() && hits == static_cast<int>(in.images.size());
  VLMD_ASSIGN_OR_RETURN(engine::runtime::PromptRows rows,
                        engine_->BuildPrompt(in.prompt, encoded, /*raw=*/true));
  r.prompt_tokens = static_cast<int64_t>(rows.tokens.size());
  r.image_tokens = rows.n_image_tokens;
  const auto t0 = Clock::now();
  VLMD_ASSIGN_OR_RETURN(slot->seq, engine_->StartSequence(rows, in.params));
  slot->decode_start = Clock::now();
  r.prefill_ms = MsBetween(t0, slot->decode_start);
  metrics_->prompt_tokens.With().Inc(static_cast<double>(r.prompt_tokens));
  return Status::Ok();
}

bool Scheduler::Publish(Slot* slot) {
  engine::runtime::Sequence& seq = *slot->seq;
  if (!seq.finished()) {
    if (slot->job->cancelled()) {
      seq.Finish("cancelled");
    } else if (Clock::now() > slot->job->input().deadline) {
      seq.Finish("deadline");
    }
  }
  slot->job->PushText(seq.TakeNewText());
  if (!seq.finished()) return false;
  JobResult& r = slot->result;
  r.tokens = seq.tokens();
  r.text = seq.text();
  r.finish_reason = seq.finish_reason();
  r.token_stats = seq.token_stats();
  r.decode_ms = MsBetween(slot->decode_start, Clock::now());
  metrics_->generated_tokens.With().Inc(static_cast<double>(r.tokens.size()));
  if (r.finish_reason == "deadline") {
    slot->job->Fail(Status(StatusCode::kDeadlineExceeded,
                           "request deadline exceeded after " + std::to_string(r.tokens.size()) +
                               " tokens"));
  } else {
    slot->job->Complete(std::move(r));
  }
  return true;
}

void Scheduler::UpdateMemoryGauges() {
  double kv = 0;
  for (const Slot& s : active_) kv += static_cast<double>(s.seq->cache()->bytes());
  metrics_->memory_bytes.With({"kv"}).Set(kv);
  metrics_->memory_bytes.With({"image_cache"}).Set(static_cast<double>(cache_->bytes()));
  metrics_->memory_bytes.With({"activations"}).Set(static_cast<double>(engine_->activation_bytes()));
}

void Scheduler::Run() {
  std::vector<engine::runtime::Sequence*> batch;
  while (true) {
    std::vector<std::shared_ptr<Job>> admit;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !active_.empty(); });
      if (stop_) return;
      while (!queue_.empty() && static_cast<int32_t>(active_.size() + admit.size()) < options_.max_batch) {
        admit.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      metrics_->queue_depth.With().Set(static_cast<double>(queue_.size()));
    }
    for (auto& job : admit) {
      const auto now = Clock::now();
      if (job->cancelled()) {
        job->Fail(Status(StatusCode::kCancelled, "client went away before the job started"));
        continue;
      }
      if (now > job->input().deadline) {
        job->Fail(Status(StatusCode::kDeadlineExceeded, "request deadline exceeded in the queue"));
        continue;
      }
      Slot slot;
      slot.job = job;
      slot.result.queue_ms = MsBetween(job->submitted(), now);
      Status s = Admit(job, &slot);
      if (!s.ok()) {
        job->Fail(std::move(s));
        continue;
      }
      if (!Publish(&slot)) active_.push_back(std::move(slot));
    }
    UpdateMemoryGauges();
    if (active_.empty()) continue;
    batch.clear();
    for (Slot& s : active_) batch.push_back(s.seq.get());
    metrics_->batch_size.With().Set(static_cast<double>(batch.size()));
    metrics_->decode_steps.With().Inc();
    Status s = engine_->DecodeStep(batch);
    if (!s.ok()) {
      // A numerical failure poisons the whole step: every sequence in it ends with the error.
      for (Slot& slot : active_) slot.job->Fail(s);
      active_.clear();
      continue;
    }
    std::erase_if(active_, [&](Slot& slot) { return Publish(&slot); });
  }
}

}  // namespace vlmd::serve
