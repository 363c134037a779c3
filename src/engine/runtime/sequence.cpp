// Sequence: sampling, stop strings and streamed text of one generation (see sequence.h).
#include "engine/runtime/sequence.h"

#include <algorithm>

#include "engine/runtime/multimodal_prompt.h"

namespace vlmd::engine::runtime {
namespace {

// Length of the longest suffix of `text` that is a proper prefix of some stop string: those
// bytes are held back until it is known whether a stop string completes.
size_t PartialStopSuffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    for (size_t len = std::min(s.size() - 1, text.size()); len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace

Sequence::Sequence(const tokenizer::Tokenizer& tok, GenerateParams params,
                   std::unique_ptr<models::KvCache> cache, std::span<const int32_t> prompt_tokens)
    : tok_(tok), params_(std::move(params)), cache_(std::move(cache)), sampler_(params_.sampling) {
  history_.reserve(prompt_tokens.size() + static_cast<size_t>(params_.max_tokens));
  for (int32_t t : prompt_tokens) {
    if (t >= 0) history_.push_back(t);
  }
  if (params_.max_tokens <= 0) finish_reason_ = "length";
}

Sequence::~Sequence() = default;

int64_t Sequence::prefill_rows_left() const {
  return prefill_ ? static_cast<int64_t>(prefill_->tokens.size()) - prefill_next_ : 0;
}

void Sequence::Accept(std::span<const float> logits) {
  if (finished()) return;
  TokenStats stats;
  const int32_t tok = sampler_.Sample(logits, history_, params_.token_stats ? &stats : nullptr);
  tokens_.push_back(tok);
  if (params_.token_stats) {
    if (params_.top_logprobs > 0) {
      // logits[tok] - logprob(tok) is log(sum exp(logits)) for every token.
      stats.top = TopLogprobs(logits, params_.top_logprobs, double(logits[tok]) - stats.logprob);
    }
    token_stats_.push_back(std::move(stats));
  }
  history_.push_back(tok);
  if (!params_.ignore_eos && tok_.IsEog(tok)) {
    // It spells no text: logprobs do not list it (OpenAI's do not; it was an empty last entry).
    text_tokens_ = std::min(text_tokens_, tokens_.size() - 1);
    Finish("stop");
    return;
  }
  token_starts_.push_back(text_.size() + pending_.size());
  pending_ += utf8_.Push(tok_.TokenToPiece(tok, /*special=*/false));
  // The earliest match of any stop string ends the text (cutting at each in list order missed a
  // match that overlaps an earlier cut: "abc STOP" with ["STOP", "c S"] gave "abc ").
  size_t cut = std::string::npos;
  for (const std::string& s : params_.stop) {
    if (!s.empty()) cut = std::min(cut, pending_.find(s));
  }
  const bool stopped = cut != std::string::npos;
  if (stopped) {
    // The tokens that begin at or after the cut spelled only the stop string (and what followed).
    const size_t cut_at = text_.size() + cut;
    text_tokens_ = static_cast<size_t>(
        std::lower_bound(token_starts_.begin(), token_starts_.end(), cut_at) - token_starts_.begin());
    pending_.resize(cut);
  }
  const size_t hold = stopped ? 0 : PartialStopSuffix(pending_, params_.stop);
  if (pending_.size() > hold) {
    const std::string_view out(pending_.data(), pending_.size() - hold);
    text_ += out;
    unread_ += out;
    pending_.erase(0, pending_.size() - hold);
  }
  if (stopped) {
    pending_.clear();
    Finish("stop", /*keep_held=*/false);  // what follows a stop string is not text
  } else if (static_cast<int32_t>(tokens_.size()) >= params_.max_tokens) {
    Finish("length");
  }
}

void Sequence::Fail(Status status) {
  if (finished()) return;
  error_ = std::move(status);
  Finish("error");
}

void Sequence::Finish(std::string_view reason, bool keep_held) {
  if (finished()) return;
  if (reason == "error") {
    // The held bytes are dropped: the tokens that spelled them are not the text's.
    text_tokens_ = std::min(text_tokens_, ReleasedWhileRunning());
  }
  finish_reason_ = std::string(reason);
  if (keep_held && finish_reason_ != "error") {
    // Held-back bytes that never became a stop string belong to the text, however the sequence
    // ends (at an end-of-generation token too: they were dropped there).
    const std::string tail = pending_ + utf8_.Flush();
    text_ += tail;
    unread_ += tail;
  }
  pending_.clear();
  // Ended while prefilling: the prompt's rows (image embeddings included) are not needed any
  // more, and a sequence parked for prefix reuse keeps only its K/V.
  prefill_.reset();
  prefill_next_ = 0;
}

size_t Sequence::released_tokens() const {
  return finished() ? text_tokens() : ReleasedWhileRunning();
}

size_t Sequence::ReleasedWhileRunning() const {
  if (token_starts_.empty()) return 0;
  // Token i ends where token i + 1 starts; the last one where its bytes end, once none of them
  // is held (as a possible stop string's start, or in the UTF-8 decoder as part of a character).
  const size_t released = text_.size();
  const size_t ended_before_last = static_cast<size_t>(
      std::upper_bound(token_starts_.begin() + 1, token_starts_.end(), released) - (token_starts_.begin() + 1));
  const bool last_released =
      ended_before_last + 1 == token_starts_.size() && pending_.empty() && utf8_.pending_bytes() == 0;
  // ... and only tokens that start before the released end: a token whose bytes all went to a
  // character the next tokens complete (or whose piece is empty) starts where the next one does,
  // and must wait with it. Every counted token is then before any later stop string's cut
  // (which is at or past `released`), so the stream never lists one the text leaves out.
  const size_t started = static_cast<size_t>(
      std::lower_bound(token_starts_.begin(), token_starts_.end(), released) - token_starts_.begin());
  return std::min({ended_before_last + (last_released ? 1 : 0), started, tokens_.size()});
}

std::string Sequence::TakeNewText() {
  std::string out;
  out.swap(unread_);
  return out;
}

}  // namespace vlmd::engine::runtime
