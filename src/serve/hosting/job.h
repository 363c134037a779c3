// A generation job: what an HTTP handler prepared (templated prompt, decoded and preprocessed
// images, sampling), and the channel through which the scheduler thread streams text back.
// Task state only; the scheduler keeps its slot state (sequence, KV cache) separately.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/sequence.h"
#include "engine/runtime/vlm_engine.h"
#include "serve/hosting/stream_window.h"

namespace vlmd::serve {

using Clock = std::chrono::steady_clock;

struct JobInput {
  // Chat-templated text with one media marker per image; the messages' words are its literal
  // ranges (control-token text in them is read as text).
  engine::tokenizer::PromptText prompt;
  std::vector<engine::runtime::PreparedImage> images;  // decoded + preprocessed by the handler
  std::vector<double> image_prepare_ms;                // decode + preprocess time per image
  // A stream's earlier frames (already encoded), placed before `images` (the prompt has a marker
  // for each, or none at all).
  std::vector<ContextFrame> context;
  engine::runtime::GenerateParams params;
  Clock::time_point deadline = Clock::time_point::max();
  // The scheduler sends each generated token's id and stats with its text (Job::Wait's tokens):
  // a chat stream with logprobs lists them per chunk, as OpenAI's does.
  bool stream_tokens = false;
  // Whose request this is (the client key's id; "" when authentication is off): prefix reuse and
  // the visual-embedding cache stay within one tenant, so that no client learns from a reused
  // prefix's length, a cache hit or their timings what another client sent.
  std::string tenant;
};

// A generated token as a stream sends it (JobInput::stream_tokens).
struct StreamedToken {
  int32_t id = 0;
  engine::runtime::TokenStats stats;
};

struct JobResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;  // "stop" | "length" | "cancelled" | "deadline"
  std::vector<engine::runtime::TokenStats> token_stats;
  // The first text_tokens of `tokens` are those the text holds (Sequence::text_tokens): what
  // logprobs list. The others spelled a stop string.
  size_t text_tokens = 0;
  // The tokens logprobs list: the first text_tokens that have their stats.
  size_t logprob_tokens() const {
    return std::min({text_tokens, tokens.size(), token_stats.size()});
  }
  int64_t prompt_tokens = 0;  // all prompt rows, image rows included
  int64_t image_tokens = 0;
  int64_t reused_prompt_tokens = 0;  // prompt rows whose K/V came from a previous request
  bool image_cache_hit = false;  // every image of the job came from the cache (and there was one)
  // The visual tokens of the job's own images (not the context), in order: a stream keeps them.
  std::vector<std::shared_ptr<const engine::runtime::EncodedImage>> encoded_images;
  double queue_ms = 0, encode_ms = 0, prefill_ms = 0, decode_ms = 0;
  // When the phases ran (trace spans): encode from its first tile to its last (other jobs' steps
  // run in between), prefill from the sequence's start to its last prompt chunk, decode from
  // there to the end. Default (epoch) when the phase did not run.
  Clock::time_point encode_start{}, encode_end{}, prefill_start{}, decode_start{}, decode_end{};
};

// Thread-safe hand-off between one producer (the scheduler) and one consumer (the handler).
class Job {
 public:
  explicit Job(JobInput input) : input_(std::move(input)), submitted_(Clock::now()) {}

  const JobInput& input() const { return input_; }
  Clock::time_point submitted() const { return submitted_; }
  // The scheduler, once image i is encoded (or found in the cache): its preprocessed pixels are
  // not needed again (tens of MB per image, held until the job ended). Scheduler thread only;
  // nobody else reads the pixels.
  void ReleaseImagePixels(size_t i) {
    if (i < input_.images.size()) std::vector<float>().swap(input_.images[i].tiles.pixels);
  }

  // Consumer side: a disconnected client or an abandoned wait sets this; the scheduler ends the
  // sequence at its next step.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  // Producer side. `tokens`: those whose text is now all out (JobInput::stream_tokens).
  void PushText(const std::string& text, std::vector<StreamedToken> tokens = {});
  void Complete(JobResult result);
  void Fail(Status status);

  // Consumer: waits until new text or tokens (only when `text` is given), completion or failure,
  // or `until`. Moves unread text into *text and unread tokens into *tokens (when given).
  // Returns true once the job is over (then result()/status() are final).
  bool Wait(Clock::time_point until, std::string* text, std::vector<StreamedToken>* tokens = nullptr);
  // True once the job is over (without waiting; then result()/status() are final).
  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return over_;
  }
  const JobResult& result() const { return result_; }  // valid once Wait returned true
  const Status& status() const { return status_; }     // OK unless failed

 private:
  JobInput input_;
  Clock::time_point submitted_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string unread_;
  std::vector<StreamedToken> unread_tokens_;
  bool over_ = false;
  JobResult result_;
  Status status_;
};

}  // namespace vlmd::serve
