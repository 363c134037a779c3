// Reply bodies of the generation endpoints (see responses.h).
#include "serve/http/responses.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace vlmd::serve {

std::string RetryAfterHeader(double seconds) {
  const double s = std::isnan(seconds) ? 1.0 : std::clamp(std::ceil(seconds), 1.0, 86400.0);
  return std::to_string(static_cast<int>(s));
}
namespace {

using nlohmann::json;

// OpenAI's {token, logprob, bytes} for one token. A piece may be a partial UTF-8 sequence:
// dump() replaces invalid bytes (U+FFFD); the exact bytes are in "bytes", as OpenAI does.
json TokenLogprobJson(const engine::tokenizer::Tokenizer& tok, int32_t id, float logprob) {
  const std::string piece(tok.TokenToPiece(id, false));
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
}

// One entry of OpenAI's logprobs.content, with its top_logprobs alternatives when the request
// asked.
json LogprobEntryJson(const engine::tokenizer::Tokenizer& tok, int32_t id,
                      const engine::runtime::TokenStats& stats) {
  json entry = TokenLogprobJson(tok, id, stats.logprob);
  json top = json::array();
  for (const auto& t : stats.top) top.push_back(TokenLogprobJson(tok, t.token, t.logprob));
  entry["top_logprobs"] = std::move(top);
  return entry;
}

// OpenAI logprobs: the generated tokens [from, the last the text holds) (not those of a stop
// string: JobResult::text_tokens).
json LogprobsJson(const JobResult& r, const engine::tokenizer::Tokenizer& tok, size_t from = 0) {
  json content = json::array();
  for (size_t i = from; i < r.logprob_tokens(); ++i) {
    content.push_back(LogprobEntryJson(tok, r.tokens[i], r.token_stats[i]));
  }
  return json{{"content", content}};
}

json UsageJson(const JobResult& r) {
  const int64_t completion = static_cast<int64_t>(r.tokens.size());
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt_tokens + completion}};
}

// The fields every chat.completion and chat.completion.chunk object shares.
json ChatObject(const ReplyContext& ctx, std::string_view object, json choices) {
  return {{"id", "chatcmpl-" + ctx.id},
          {"object", std::string(object)},
          {"created", ctx.created},
          {"model", ctx.model},
          {"system_fingerprint", "vlmd-" + ctx.model_hash.substr(0, 12)},
          {"choices", std::move(choices)}};
}

// "version", "routing", "redaction" and "trust": vlmd's additions to every reply object (OpenAI clients
// ignore unknown fields).
// "budget" when the token budget made an image smaller (SPEC S7: the reply says so): the first
// image it shrank at the top level, every one that shrank in "images", in request order.
void AddBudget(const PreparedJob& prepared, json* j) {
  if (prepared.budget.empty()) return;
  const BudgetAction& first = prepared.budget[prepared.budget_first];
  json images = json::array();
  for (const BudgetAction& b : prepared.budget) {
    images.push_back({{"index", b.index}, {"downsampled_from", b.from}, {"to", b.to}});
  }
  (*j)["budget"] = {{"downsampled_from", first.from}, {"to", first.to}, {"images", images}};
}

void AddGuardFields(const ReplyContext& ctx, json* j) {
  if (!ctx.version.empty()) (*j)["version"] = ctx.version;
  if (!ctx.route.empty()) {
    json routing{{"route", ctx.route}};
    if (!ctx.tier.empty()) routing["tier"] = ctx.tier;
    if (ctx.complexity) routing["complexity"] = *ctx.complexity;
    (*j)["routing"] = routing;
  }
  if (ctx.redaction) (*j)["redaction"] = {{"faces", (*ctx.redaction)[0]}, {"plates", (*ctx.redaction)[1]}};
  if (ctx.trust) {
    (*j)["trust"] = {{"mean_entropy_bits", ctx.trust->mean_entropy_bits},
                     {"min_token_prob", ctx.trust->min_token_prob},
                     {"flagged", ctx.trust->flagged}};
  }
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string_view OpenAiFinishReason(std::string_view reason) {
  if (reason == "stop" || reason == "length") return reason;
  if (reason == "cancelled") return "stop";
  return reason;
}

std::string InvokeReply(const ReplyContext& ctx, const PreparedJob& prepared, const JobResult& r,
                        const engine::tokenizer::Tokenizer& tok) {
  json j{{"id", ctx.id},
         {"text", r.text},
         {"finish_reason", r.finish_reason},
         {"latency_ms", ctx.latency_ms},
         {"model", ctx.model},
         {"model_hash", ctx.model_hash},
         {"usage",
          {{"prompt_tokens", r.prompt_tokens},
           {"image_tokens", r.image_tokens},
           {"completion_tokens", r.tokens.size()},
           {"reused_prompt_tokens", r.reused_prompt_tokens}}},
         {"timings",
          {{"queue_ms", r.queue_ms},
           {"image_decode_ms", prepared.image_decode_ms},
           {"encode_ms", r.encode_ms},
           {"prefill_ms", r.prefill_ms},
           {"decode_ms", r.decode_ms}}},
         {"cache",
          {{"image", prepared.input.images.empty() ? "none" : (r.image_cache_hit ? "hit" : "miss")}}}};
  if (prepared.stream) {
    const StreamPart& s = *prepared.stream;
    j["stream"] = {{"id", s.id},
                   {"context_frames", s.context_frames},
                   {"window", s.window},
                   {"motion", s.motion},
                   {"dropped_for_budget", s.dropped_for_budget},
                   {"dropped_for_allowlist", s.dropped_for_allowlist}};
    if (!s.no_context_reason.empty()) j["stream"]["no_context_reason"] = s.no_context_reason;
  }
  if (prepared.redaction) j["timings"]["redact_ms"] = prepared.redaction->detect_ms;
  AddBudget(prepared, &j);
  if (ctx.logprobs) j["logprobs"] = LogprobsJson(r, tok);
  AddGuardFields(ctx, &j);
  return Dump(j);
}

std::string ChatReply(const ReplyContext& ctx, const PreparedJob& prepared, const JobResult& r,
                      const engine::tokenizer::Tokenizer& tok) {
  json choice{{"index", 0},
              {"message", {{"role", "assistant"}, {"content", r.text}}},
              {"finish_reason", OpenAiFinishReason(r.finish_reason)},
              {"logprobs", ctx.logprobs ? LogprobsJson(r, tok) : json(nullptr)}};
  json j = ChatObject(ctx, "chat.completion", json::array({choice}));
  j["usage"] = UsageJson(r);
  AddBudget(prepared, &j);
  AddGuardFields(ctx, &j);
  return Dump(j);
}

std::string ChatChunk(const ReplyContext& ctx, std::optional<std::string_view> role,
                      std::optional<std::string_view> content, std::span<const StreamedToken> tokens,
                      const engine::tokenizer::Tokenizer* tok) {
  json delta = json::object();
  if (role) delta["role"] = std::string(*role);
  if (content) delta["content"] = std::string(*content);
  json logprobs = nullptr;
  if (!tokens.empty() && tok != nullptr) {
    json entries = json::array();
    for (const StreamedToken& t : tokens) entries.push_back(LogprobEntryJson(*tok, t.id, t.stats));
    logprobs = json{{"content", std::move(entries)}};
  }
  json choice{{"index", 0},
              {"delta", delta},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", nullptr}};
  json j = ChatObject(ctx, "chat.completion.chunk", json::array({choice}));
  if (ctx.include_usage) j["usage"] = nullptr;
  return Dump(j);
}

std::string ChatFinishChunk(const ReplyContext& ctx, const PreparedJob& prepared, const JobResult& r,
                            const engine::tokenizer::Tokenizer& tok, std::optional<size_t> tokens_sent) {
  // Streamed: the tokens no text chunk listed, null when none is left (OpenAI's last chunk);
  // otherwise all of them.
  const bool rest = ctx.logprobs && (!tokens_sent || *tokens_sent < r.logprob_tokens());
  json choice{{"index", 0},
              {"delta", json::object()},
              {"logprobs", rest ? LogprobsJson(r, tok, tokens_sent.value_or(0)) : json(nullptr)},
              {"finish_reason", std::string(OpenAiFinishReason(r.finish_reason))}};
  json j = ChatObject(ctx, "chat.completion.chunk", json::array({choice}));
  if (ctx.include_usage) j["usage"] = nullptr;
  AddBudget(prepared, &j);
  AddGuardFields(ctx, &j);
  return Dump(j);
}

std::string ChatUsageChunk(const ReplyContext& ctx, const JobResult& r) {
  json j = ChatObject(ctx, "chat.completion.chunk", json::array());
  j["usage"] = UsageJson(r);
  return Dump(j);
}

}  // namespace vlmd::serve
