// The generation state of one request: its KV cache, sampler, token history and the text it has
// produced so far (UTF-8 safe, stop strings held back until they are decided). VlmEngine fills
// it with a prefill and then advances it one token per decode step, alone (Generate) or batched
// with other sequences (DecodeStep, the server's continuous batching).
// Not thread-safe: one owner (the scheduler thread, or the Generate caller) at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/models/kv_cache.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8_stream.h"

namespace vlmd::engine::runtime {

struct PromptRows;  // multimodal_prompt.h
class VlmEngine;

struct GenerateParams {
  SamplingParams sampling;
  int32_t max_tokens = 128;
  std::vector<std::string> stop;  // stop strings (not included in the text)
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  bool token_stats = false;       // record TokenStats per token (costs a softmax per token)
  int32_t top_logprobs = 0;       // with token_stats: also the n most likely tokens per step
};

class Sequence {
 public:
  // `tok` must outlive the sequence; `prompt_tokens` are the prompt's text ids (image rows
  // excluded), the history the repetition penalty looks at.
  Sequence(const tokenizer::Tokenizer& tok, GenerateParams params,
           std::unique_ptr<models::KvCache> cache, std::span<const int32_t> prompt_tokens);
  ~Sequence();

  // Samples the next token from `logits` [n_vocab] and updates the text; the sequence finishes
  // on an end-of-generation token, a stop string, or max_tokens.
  void Accept(std::span<const float> logits);
  // Ends the sequence now with `reason` (e.g. "cancelled", "deadline"); idempotent. Text held
  // back as a possible stop-string start becomes text, unless `keep_held` is false (a stop
  // string matched: what follows it is not text) or the reason is "error".
  void Finish(std::string_view reason, bool keep_held = true);
  // Ends the sequence with finish_reason "error" and `status` (e.g. non-finite logits).
  void Fail(Status status);
  const Status& error() const { return error_; }  // OK unless Fail()ed

  bool finished() const { return !finish_reason_.empty(); }
  // True from VlmEngine::BeginSequence until PrefillChunk computed the last prompt row (and
  // sampled the first token), or the sequence finished: not yet ready for DecodeStep.
  bool prefilling() const { return prefill_ != nullptr; }
  // Prompt rows still to compute while prefilling (0 otherwise).
  int64_t prefill_rows_left() const;
  // "stop" (EOS or stop string), "length" (max_tokens), or what Finish was given; "" while running.
  const std::string& finish_reason() const { return finish_reason_; }
  // The token to feed in the next decode step (the last one sampled).
  int32_t last_token() const { return tokens_.back(); }

  // Text produced since the previous call (valid UTF-8, stop strings removed). Once finished,
  // also flushes what was held back.
  std::string TakeNewText();

  const std::vector<int32_t>& tokens() const { return tokens_; }  // generated ids (incl. final EOS)
  // How many of tokens() the text holds at least in part: all of them, unless a stop string cut
  // the text; then those that began before the cut (the rest spelled the stop string). What
  // logprobs list, as llama-server leaves the stop word's tokens out.
  size_t text_tokens() const { return std::min(text_tokens_, tokens_.size()); }
  // How many of tokens() have spelled all of their text into text() (a stream sends their
  // logprobs with it): while running, those that end at or before the released text's end (a
  // token whose bytes are held, as a possible stop string's start or a partial UTF-8 character,
  // waits); once finished, text_tokens().
  size_t released_tokens() const;
  const std::string& text() const { return text_; }               // all text released so far
  const std::vector<TokenStats>& token_stats() const { return token_stats_; }
  models::KvCache* cache() { return cache_.get(); }
  const GenerateParams& params() const { return params_; }

 private:
  const tokenizer::Tokenizer& tok_;
  GenerateParams params_;
  std::unique_ptr<models::KvCache> cache_;
  Sampler sampler_;
  std::vector<int32_t> history_;  // prompt text ids + generated ids (repetition penalty)
  std::vector<int32_t> tokens_;
  std::vector<TokenStats> token_stats_;
  std::vector<size_t> token_starts_;  // offset of each token's first byte in text_ + pending_
  size_t text_tokens_ = SIZE_MAX;     // set when a stop string cuts the text
  tokenizer::Utf8StreamDecoder utf8_;
  std::string pending_;   // decoded, not yet released (may be the start of a stop string)
  std::string text_;      // released text
  std::string unread_;    // released, not yet taken by TakeNewText
  std::string finish_reason_;
  Status error_;

  size_t ReleasedWhileRunning() const;  // released_tokens() before the sequence finished

  // Chunked prefill state, owned by VlmEngine (BeginSequence / PrefillChunk).
  friend class VlmEngine;
  std::unique_ptr<PromptRows> prefill_;  // the prompt; released once it is all in the cache
  int64_t prefill_next_ = 0;             // first row not yet in the cache
  // RoPE position of a generated row = its slot + position_shift_ (PromptRows::position_shift).
  int32_t position_shift_ = 0;
};

}  // namespace vlmd::engine::runtime
