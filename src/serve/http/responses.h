// JSON bodies of the generation endpoints: vlmd's /v1/vlm/invoke reply and OpenAI's
// chat.completion / chat.completion.chunk objects. Pure functions of a finished (or streaming)
// job; no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"
#include "serve/hosting/job.h"
#include "serve/hosting/prepare_job.h"
#include "serve/policy/trust.h"

namespace vlmd::serve {

struct ReplyContext {
  std::string id;          // request id ("req-42"); chat ids are "chatcmpl-" + id
  std::string model;       // served model name
  std::string model_hash;
  int64_t created = 0;     // unix seconds
  double latency_ms = 0;
  bool logprobs = false;
  // stream_options.include_usage: every chunk carries "usage": null but the last (OpenAI's form).
  bool include_usage = false;
  // Guard-rail outcomes (issue 6), added to every reply object when set.
  std::string version;               // the serving model's version
  std::string route;                 // the route the request named ("" : a model directly)
  std::string tier;                  // complexity tier ("" : not complexity-routed)
  std::optional<double> complexity;  // the score that chose the tier
  std::optional<policy::TrustSignals> trust;  // set once the reply is complete
  std::optional<std::array<int, 2>> redaction;  // faces and plates covered (redaction on)
};

// {"id","text","finish_reason","latency_ms","model","model_hash","version","usage","timings",
//  "cache","stream"?,"budget"?,"logprobs"?,"routing"?,"trust"?}
// A Retry-After value: whole seconds, at least 1, at most a day (clamped before the conversion:
// a key's rate of 1e-12/s gave a wait past any int, an undefined conversion).
std::string RetryAfterHeader(double seconds);

std::string InvokeReply(const ReplyContext& ctx, const PreparedJob& prepared, const JobResult& r,
                        const engine::tokenizer::Tokenizer& tok);
// OpenAI chat.completion (non-streaming), with vlmd's "budget" (as the invoke reply's) when the
// token budget made an image smaller.
std::string ChatReply(const ReplyContext& ctx, const PreparedJob& prepared, const JobResult& r,
                      const engine::tokenizer::Tokenizer& tok);
// One chat.completion.chunk: a delta with `role` (first chunk) and/or `content`, and the
// logprobs of `tokens` (those whose text the chunk completes; null when none).
std::string ChatChunk(const ReplyContext& ctx, std::optional<std::string_view> role,
                      std::optional<std::string_view> content, std::span<const StreamedToken> tokens = {},
                      const engine::tokenizer::Tokenizer* tok = nullptr);
// The final chunk (finish_reason, "budget" as ChatReply's, and "trust" when the context has
// it). With the request's
// logprobs, so that a client that concatenates the chunks' lists gets them all: when the text
// chunks listed their tokens as they went (`tokens_sent` of them), the reply's tokens past those
// (null when none is left); without `tokens_sent` (a word filter, which holds text back across
// tokens and may cut it, was on) every token, or none once the filter matched.
std::string ChatFinishChunk(const ReplyContext& ctx, const PreparedJob& prepared, const JobResult& r,
                            const engine::tokenizer::Tokenizer& tok,
                            std::optional<size_t> tokens_sent = std::nullopt);
// The extra last chunk of a stream with stream_options.include_usage: "choices": [] and usage.
std::string ChatUsageChunk(const ReplyContext& ctx, const JobResult& r);
// OpenAI finish_reason for a sequence's reason ("stop", "length"; others pass through).
std::string_view OpenAiFinishReason(std::string_view reason);

}  // namespace vlmd::serve
