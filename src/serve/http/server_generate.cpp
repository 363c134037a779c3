// The generation endpoints: request -> guard rails -> route -> job -> (filtered) reply, and one
// audit line per request (see server.h, guard.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/image/image.h"
#include "serve/api/multipart.h"
#include "serve/http/image_fetch.h"
#include "serve/http/server_handlers.h"
#include "serve/policy/complexity.h"
#include "serve/policy/traffic_split.h"

namespace vlmd::serve {
namespace {

// How often a non-streaming handler checks that its client is still connected.
constexpr auto kDisconnectPoll = std::chrono::milliseconds(250);

using nlohmann::json;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The complexity score of a request for tier routing: the first image's edge density (decoded
// here in full, before any model is chosen; *first keeps it for PrepareJob, which takes it where
// its own decode would be the same) and the token entropy of the prompt text under
// `tokenizer_host`'s vocabulary.
Result<double> Complexity(const api::GenerationRequest& request, const ModelHost& tokenizer_host,
                          const PrepareOptions& prepare, const policy::ComplexityWeights& weights,
                          std::optional<DecodedImage>* first) {
  // The entropy of the text's first 64 KiB (cut at a character boundary): this runs before any
  // model and its budget check, and tokenizing a whole 30 MB prompt here cost 3.6 s and 250 MB
  // before the chosen model refused it as over its budget.
  constexpr size_t kScoredTextBytes = 64 << 10;
  std::string text;
  for (const api::ChatMessage& m : request.messages) {
    if (text.size() >= kScoredTextBytes) break;
    text.append(m.text, 0, kScoredTextBytes + 1 - text.size());  // one byte past: the cut below
    text += '\n';
  }
  if (text.size() > kScoredTextBytes) {
    size_t cut = kScoredTextBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
  }
  VLMD_ASSIGN_OR_RETURN(auto tokens, tokenizer_host.engine().tokenizer().Tokenize(text, false, false));
  std::optional<double> edges;
  if (!request.images.empty()) {
    VLMD_ASSIGN_OR_RETURN(DecodedImage d,
                          DecodeTimed(request.images.front(), prepare.decode_limits));
    edges = policy::EdgeDensity(d.image.width, d.image.height, d.image.rgb);
    *first = std::move(d);
  }
  return policy::ComplexityScore(edges, policy::TokenEntropyScore(tokens), weights);
}

// The mean L2 norm of the visual-token embeddings of a job's own images (rows of n_embd);
// nullopt without images.
std::optional<double> MeanEmbeddingNorm(const JobResult& r, int64_t n_embd) {
  if (n_embd <= 0) return std::nullopt;
  double sum = 0;
  int64_t rows = 0;
  for (const auto& image : r.encoded_images) {
    if (!image) continue;
    const std::vector<float>& e = image->embeddings;
    for (size_t row = 0; row + size_t(n_embd) <= e.size(); row += size_t(n_embd)) {
      double sq = 0;
      for (size_t i = row; i < row + size_t(n_embd); ++i) sq += double(e[i]) * double(e[i]);
      sum += std::sqrt(sq);
      ++rows;
    }
  }
  if (rows == 0) return std::nullopt;
  return sum / double(rows);
}

}  // namespace

std::optional<api::ApiError> Server::Handlers::Resolve(Call* call) {
  const std::string name =
      call->request.model.empty() ? s_.router_.DefaultName() : call->request.model;
  auto not_found = [&](const std::string& why) {
    return api::ApiError{404, "invalid_request_error", "model_not_found", why};
  };
  auto not_loaded = [&](const std::string& model) {
    return api::ApiError{503, "server_error", "not_ready",
                         "route '" + name + "': model '" + model + "' is not loaded"};
  };
  if ((call->model = s_.router_.Get(name))) return std::nullopt;
  const std::optional<RouteConfig> route = s_.router_.GetRoute(name);
  if (!route) return not_found("model '" + name + "' is not served here (GET /v1/models lists them)");
  call->reply.route = route->name;
  std::string target;
  if (route->is_split()) {
    // Sticky per client: the key id of a client's own key, else the client's address (clients
    // of the single shared --api-key, or anonymous ones, behind one proxy share a bucket: give
    // them keys of their own for a real split).
    const std::string who = call->client.key_is_client() ? call->client.key_id : call->remote_addr;
    std::vector<double> weights;
    for (const RouteTarget& t : route->split) weights.push_back(t.weight);
    const int pick = policy::PickWeighted(weights, policy::StickyBucket(route->name, who));
    if (pick < 0) return api::ApiError{503, "server_error", "not_ready", "route '" + name + "' has no weight"};
    target = route->split[size_t(pick)].model;
  } else {
    const auto light = s_.router_.Get(route->tiers[0]);
    if (!light) return not_loaded(route->tiers[0]);
    auto score =
        Complexity(call->request, *light, s_.options_.prepare, route->weights, &call->routed_image);
    if (!score.ok()) return api::FromStatus(score.status());
    const policy::Tier tier = policy::PickTier(*score, route->thresholds);
    call->reply.tier = policy::TierName(tier);
    call->reply.complexity = *score;
    target = route->tiers[static_cast<int>(tier)];
    s_.metrics_->route_tier.With({route->name, call->reply.tier}).Inc();
    s_.metrics_->complexity_score.With({route->name}).Observe(*score);
  }
  call->model = s_.router_.Get(target);
  if (!call->model) return not_loaded(target);
  return std::nullopt;
}

void Server::Handlers::Generate(Kind kind, const HttpRequest& req, HttpResponse& res) {
  auto call = std::make_shared<Call>();
  call->kind = kind;
  call->route = kind == Kind::kInvoke ? "/v1/vlm/invoke" : "/v1/chat/completions";
  call->t0 = Clock::now();
  call->remote_addr = req.remote_addr;
  call->reply.id = NextId();
  call->reply.created = UnixNow();
  res.set_header("X-Request-Id", call->reply.id);
  StartTrace(call.get(), req, res);
  // Counted until the call is destroyed: after the reply for plain requests, after the last event
  // for streams (the content provider holds the call). Drain() waits for the count to reach 0.
  s_.in_flight_.fetch_add(1);
  call->in_flight = std::shared_ptr<void>(nullptr, [server = &s_](void*) { server->in_flight_.fetch_sub(1); });
  auto fail = [&](const api::ApiError& e) {
    // Every 503 here passes (a drain, the decode budget, a model not loaded yet): say when to
    // come back, as the 429s do.
    if (e.http_status == 503 && HeaderCount(res.headers, "Retry-After") == 0) res.set_header("Retry-After", "1");
    SendError(res, e);
    // A failed audit write cannot make this worse: the client gets its error either way. A key
    // over its rate is sampled like the refusals before authentication: its refusals cost the
    // server next to nothing and must not flood the trail.
    (void)AuditCall(*call, e.http_status, nullptr, e.code, e.code == "rate_limited");
    Observe(*call, e.http_status);
    spdlog::info("{} {} -> {} {}: {}", call->reply.id, call->route, e.http_status, e.code,
                 LogSafe(e.message));
  };
  double retry_after_s = 0;
  std::string limited_key;
  auto client = s_.guard_->Admit(req.header("Authorization"), &retry_after_s, &limited_key);
  if (!client.ok()) {
    if (client.status().code() == StatusCode::kResourceExhausted) {
      call->client.key_id = limited_key;
      res.set_header("Retry-After", RetryAfterHeader(retry_after_s));
      return fail({429, "rate_limit_error", "rate_limited", client.status().message()});
    }
    return fail({401, "invalid_request_error", "invalid_api_key",
                 "missing or wrong API key (send Authorization: Bearer <key>)"});
  }
  call->client = *client;
  if (s_.draining_.load()) {
    return fail({503, "server_error", "shutting_down", "the server is shutting down"});
  }
  if (!s_.ready_.load()) return fail({503, "server_error", "not_ready", "the model is still loading"});
  // A client gone while its request waited for a handler thread (under load, many give up and
  // retry) gets none of the work below: no image fetched, decoded, redacted or encoded for it.
  if (req.PeerClosed()) {
    res.close = true;
    return fail({499, "invalid_request_error", "client_closed",
                 "the client closed the connection before its request was handled"});
  }
  const api::RequestLimits& limits = s_.options_.limits;
  Result<api::GenerationRequest> parsed = InvalidArgumentError("unreachable");
  const std::string content_type(req.header("Content-Type"));
  if (kind == Kind::kChat) {
    if (!api::HasMediaType(content_type, "application/json")) {
      return fail({415, "invalid_request_error", "unsupported_media_type",
                   "send application/json, not " + (content_type.empty() ? std::string("no Content-Type") : content_type)});
    }
    parsed = api::ParseChatCompletion(req.body, limits);
  } else if (api::IsMultipartFormData(content_type)) {
    auto multipart = api::ParseMultipart(req.body, content_type);
    if (!multipart.ok()) return fail(api::FromStatus(multipart.status()));
    std::vector<std::pair<std::string, std::string>> parts;
    for (api::MultipartPart& part : *multipart) parts.emplace_back(part.name, std::move(part.content));
    Result<api::MultipartParts> sorted = api::SortMultipartParts(std::move(parts));
    parsed = sorted.ok() ? api::ParseInvokeMultipart(sorted->request_json,
                                                     std::move(sorted->images), limits)
                         : Result<api::GenerationRequest>(sorted.status());
  } else {
    if (!api::HasMediaType(content_type, "application/json")) {
      return fail({415, "invalid_request_error", "unsupported_media_type",
                   "send application/json or multipart/form-data, not " +
                       (content_type.empty() ? std::string("no Content-Type") : content_type)});
    }
    parsed = api::ParseInvokeJson(req.body, limits);
  }
  if (!parsed.ok()) return fail(api::FromStatus(parsed.status()));
  call->request = std::move(*parsed);
  // http(s) image URLs (hosts already checked against server.image_url_hosts) become bytes here,
  // so the allowlist and everything after see every image alike.
  if (Status s = FetchImageUrls(&call->request, {s_.options_.limits.max_image_bytes,
                                                 s_.options_.image_fetch_timeout_s});
      !s.ok()) {
    return fail(api::FromStatus(s));
  }
  // The allowlist sees the encoded bytes: an unlisted image never reaches a decoder.
  if (Status s = s_.guard_->CheckImages(call->request.images, &call->image_hashes,
                                        &call->allowlist_decision);
      !s.ok()) {
    return fail(ForbiddenImage(s));
  }
  if (auto e = Resolve(call.get())) return fail(*e);
  const ModelSpec& spec = call->model->spec();
  call->reply.include_usage = call->request.include_usage;  // chat's stream_options
  // Redaction: the model's setting, else the server's; then a route's own, when it has one, on
  // top. A route adds to what the model holds and never takes it away (its setting replaced
  // the model's, so a route could turn redaction off, or weaken it with another threshold,
  // though clients may name the model directly): both run, the model's first.
  std::vector<std::shared_ptr<const redact::Redactor>> redactors;
  std::string redact_scope = "-";  // the settings, for the stream scope
  {
    std::vector<redact::RedactOptions> settings;
    if (const redact::RedactOptions& own = spec.redact ? *spec.redact : s_.options_.redact; own.enabled()) {
      settings.push_back(own);
    }
    if (!call->reply.route.empty()) {
      auto route = s_.router_.GetRoute(call->reply.route);
      if (route && route->redact && route->redact->enabled() &&
          (settings.empty() || redact::RedactSettingKey(*route->redact) != redact::RedactSettingKey(settings[0]))) {
        settings.push_back(*route->redact);
      }
    }
    if (!settings.empty()) {
      call->reply.redaction = std::array<int, 2>{0, 0};
      redact_scope.clear();
      for (const redact::RedactOptions& ro : settings) {
        redact_scope += redact::RedactSettingKey(ro) + ";";
        if (call->request.images.empty()) continue;
        std::shared_ptr<const redact::Redactor> r = s_.RedactorFor(ro);
        if (!r) {
          return fail({503, "server_error", "redaction_unavailable",
                       "redaction is required for this model and its detectors cannot load"});
        }
        redactors.push_back(std::move(r));
      }
    }
  }
  StreamContextFn stream;
  if (!call->request.stream_id.empty()) {
    // Scoped by client and model files: one client cannot see another's frames, and visual
    // tokens of one model version never reach another.
    // Without keys of their own (no API keys, or the single shared --api-key), by client
    // address (clients behind one proxy then share streams).
    const std::string client =
        call->client.key_is_client() ? "key:" + call->client.key_id : "addr:" + call->remote_addr;
    // ... and by redaction setting: frames kept without redaction never join a redacted prompt.
    call->stream_key = client + "\n" + call->model->hash() + "\n" +
                       redact_scope + "\n" +
                       call->request.stream_id;
    stream = [this, key = call->stream_key](const engine::image::Image* frame) {
      StreamView view = frame != nullptr ? s_.streams_->Arrive(key, Thumbnail(*frame)) : s_.streams_->Peek(key);
      // A kept frame whose image has left the allowlist since is no context any more.
      view.withdrawn = static_cast<int>(std::erase_if(
          view.context, [&](const ContextFrame& f) { return !s_.guard_->ImageStillAllowed(f.image_sha256); }));
      return view;
    };
  }
  // The detectors take a core each for the whole decode + detection: a bounded number at once.
  std::optional<ConcurrencyLimit::Slot> redaction_slot =
      !redactors.empty() ? s_.redaction_slots_.Acquire(s_.options_.redaction_wait) : std::nullopt;
  if (!redactors.empty() && !redaction_slot) {
    res.set_header("Retry-After", "1");
    return fail({429, "rate_limit_error", "redaction_busy",
                 "every redaction slot (" + std::to_string(s_.redaction_slots_.slots()) +
                     ") stayed busy; retry later"});
  }
  call->prepare_t0 = Clock::now();
  std::vector<const redact::Redactor*> redactor_list;
  for (const auto& r : redactors) redactor_list.push_back(r.get());
  auto prepared = PrepareJob(*call->model, call->request, s_.options_.prepare, stream,
                             redactor_list, std::move(call->routed_image));
  call->routed_image.reset();
  call->prepare_t1 = Clock::now();
  redaction_slot.reset();
  if (!prepared.ok()) {
    // OpenAI's answer to a prompt that leaves no room for the reply (its SDKs raise their
    // BadRequestError, which context-length handling catches); the invoke API keeps its 422.
    if (kind == Kind::kChat && IsContextOverflow(prepared.status())) {
      return fail({400, "invalid_request_error", "context_length_exceeded",
                   prepared.status().message()});
    }
    return fail(api::FromStatus(prepared.status()));
  }
  call->prepared = std::move(*prepared);
  call->prepared.input.tenant = call->client.key_id;
  if (const auto& red = call->prepared.redaction) {
    call->reply.redaction = std::array<int, 2>{red->faces, red->plates};
    if (red->faces > 0) s_.metrics_->redactions.With({"faces"}).Inc(red->faces);
    if (red->plates > 0) s_.metrics_->redactions.With({"plates"}).Inc(red->plates);
    s_.metrics_->redact_duration.With().Observe(red->detect_ms / 1000.0);
  }
  call->reply.model = call->reply.route.empty() ? spec.name : call->reply.route;
  call->reply.model_hash = call->model->hash();
  call->reply.version = spec.version;
  call->reply.logprobs = call->request.sampling.logprobs;
  call->filter = s_.guard_->NewFilter();
  // The reply continues the prompt's end (an assistant message to continue, a raw prompt): a
  // word begun there and finished by the reply is the reply's to mask.
  if (call->filter) call->filter->Prime(call->prepared.input.prompt.text());
  // A chat stream with logprobs lists each token's with the chunk that completes its text. A word
  // filter holds text back across tokens and may cut it: then they all wait for the last chunk.
  call->prepared.input.stream_tokens =
      kind == Kind::kChat && call->request.stream && call->reply.logprobs && !call->filter;
  // The job takes the input; the call keeps what the handler reads later (keys, sizes, the
  // deadline) without the preprocessed pixels, which were held twice for the whole request.
  std::vector<std::vector<float>> pixels;
  for (auto& img : call->prepared.input.images) pixels.push_back(std::move(img.tiles.pixels));
  JobInput for_job = call->prepared.input;  // a copy without the pixels (moved out above)
  for (size_t i = 0; i < pixels.size(); ++i) for_job.images[i].tiles.pixels = std::move(pixels[i]);
  call->job = std::make_shared<Job>(std::move(for_job));
  Status submitted = call->model->scheduler().Submit(call->job);
  if (!submitted.ok()) {
    if (submitted.code() == StatusCode::kResourceExhausted) {
      res.set_header("Retry-After", "1");
      return fail({429, "rate_limit_error", "queue_full", submitted.message()});
    }
    return fail(api::FromStatus(submitted));
  }
  // Counted once the version has the request (a queue_full 429 above ran nowhere: during a canary
  // under load it leaned the split towards the version whose queue was full).
  s_.metrics_->route_version
      .With({call->reply.route.empty() ? spec.name : call->reply.route, spec.name, spec.version})
      .Inc();
  if (call->request.stream) {
    Stream(call, req, res);
  } else {
    Reply(*call, req, res);
  }
}

void Server::Handlers::KeepStreamFrame(const Call& call, const JobResult& r) {
  if (!call.prepared.stream) return;
  // Counted for answered requests only (a refused or failed one changes nothing).
  s_.metrics_->stream_context_frames.With().Inc(call.prepared.stream->context_frames);
  const std::string& reason = call.prepared.stream->no_context_reason;
  if (!reason.empty()) s_.metrics_->stream_no_context.With({reason}).Inc();
  // (A prepared stream part means the request named a stream: stream_key is set.)
  if (call.prepared.input.images.empty() || r.encoded_images.empty()) return;
  const StreamPart& part = *call.prepared.stream;
  s_.streams_->Push(call.stream_key, ContextFrame{.key = call.prepared.input.images.front().key,
                                                  .encoded = r.encoded_images.front(),
                                                  .prompt_tokens = part.frame_tokens,
                                                  .thumbnail = part.thumbnail,
                                                  .sequence = part.sequence,
                                                  .image_sha256 = call.image_hashes.front()});
}

std::string Server::Handlers::PassText(Call& call, std::string text) {
  if (call.filter && !text.empty()) {
    policy::StreamFilter::Output out = call.filter->Feed(text);
    if (out.blocked) call.job->Cancel();  // stop generating what will not be sent
    text = std::move(out.text);
  }
  call.sent_text += text;
  return text;
}

JobResult Server::Handlers::Finalize(Call& call, std::string* tail) {
  JobResult r = call.job->result();
  if (call.filter) {
    if (!call.filter->blocked()) {
      *tail = call.filter->Finish().text;
      call.sent_text += *tail;
    }
    r.text = call.sent_text;
    if (call.filter->blocked()) r.finish_reason = "content_filter";
    // Token logprobs spell the generated tokens, including what the filter removed: leave them
    // out when their pieces hold a filtered word.
    if (call.reply.logprobs &&
        (call.filter->matches() > 0 || LogprobsShowAFilteredWord(call, r))) {
      call.reply.logprobs = false;
    }
    s_.guard_->CountFilter(*call.filter);
  }
  call.reply.trust = s_.guard_->Trust(r);
  if (s_.drift_) RecordDrift(call, r);
  return r;
}

void Server::Handlers::RecordDrift(const Call& call, const JobResult& r) {
  using policy::DriftStat;
  policy::DriftSample sample;
  if (!r.token_stats.empty()) sample[DriftStat::kMeanEntropy] = call.reply.trust->mean_entropy_bits;
  sample[DriftStat::kTrustFlagged] = call.reply.trust->flagged ? 1.0 : 0.0;
  sample[DriftStat::kReplyTokens] = static_cast<double>(r.tokens.size());
  sample[DriftStat::kFinishReason] = policy::FinishReasonCategory(r.finish_reason);
  sample[DriftStat::kFilterHit] =
      call.filter && (call.filter->blocked() || call.filter->matches() > 0) ? 1.0 : 0.0;
  if (const auto* vision = call.model->engine().vision()) {
    sample[DriftStat::kEmbeddingNorm] = MeanEmbeddingNorm(r, vision->n_embd());
  }
  sample[DriftStat::kVisualTokens] = static_cast<double>(r.image_tokens);
  s_.drift_->Record(call.model->spec().name, call.model->hash(), sample);
}

bool Server::Handlers::LogprobsShowAFilteredWord(const Call& call, const JobResult& r) const {
  const auto& tok = call.model->engine().tokenizer();
  const size_t shown = r.logprob_tokens();
  // The prompt's end (as far back as a word can begin), then the chosen tokens' pieces; ends[i]:
  // where token i's piece ends in it.
  const std::string& prompt = call.prepared.input.prompt.text();
  const size_t reach = std::max<size_t>(s_.guard_->max_filtered_word_bytes(), 1) - 1;
  std::string text = prompt.substr(prompt.size() - std::min(prompt.size(), reach));
  const size_t pieces_start = text.size();
  std::vector<size_t> ends(shown);
  for (size_t i = 0; i < shown; ++i) {
    text += tok.TokenToPiece(r.tokens[i], false);
    ends[i] = text.size();
  }
  if (s_.guard_->ContainsFilteredWord(std::string_view(text).substr(pieces_start))) return true;
  // Each alternative is read after the text before it: one that is a word, or finishes one
  // begun there, would show it. Words wholly in that text are not the alternative's (the
  // prompt's are the client's own).
  for (size_t i = 0; i < shown; ++i) {
    const size_t end = i == 0 ? pieces_start : ends[i - 1];
    const std::string_view before = std::string_view(text).substr(end - std::min(end, reach), std::min(end, reach));
    for (const auto& alt : r.token_stats[i].top) {
      if (s_.guard_->CompletesFilteredWord(before, tok.TokenToPiece(alt.token, false))) return true;
    }
  }
  return false;
}

Status Server::Handlers::AuditCall(const Call& call, int status, const JobResult* r,
                                   const std::string& error, bool sampled) {
  call.audited = true;
  if (!s_.guard_->audit_enabled()) return Status::Ok();
  json rec{{"request_id", call.reply.id},
           {"trace_id", obs::Hex(call.trace_id)},
           {"key_id", call.client.key_id},
           {"remote_addr", call.remote_addr},
           {"route", call.route},
           {"status", status},
           {"latency_ms", SecondsSince(call.t0) * 1000.0},
           {"image_sha256", call.image_hashes},
           {"allowlist", call.allowlist_decision}};
  if (call.model) {
    rec["model"] = call.model->spec().name;
    rec["version"] = call.model->spec().version;
    rec["model_hash"] = call.model->hash();
  } else if (!call.request.model.empty()) {
    rec["model"] = call.request.model;
  }
  if (!call.reply.route.empty()) rec["model_route"] = call.reply.route;
  if (!call.reply.tier.empty()) rec["tier"] = call.reply.tier;
  if (call.prepared.stream) {
    // The answer also rests on the stream's earlier frames (their images were audited when
    // they arrived): how many.
    rec["stream"] = {{"id", call.prepared.stream->id},
                     {"context_frames", call.prepared.stream->context_frames}};
    if (!call.prepared.stream->no_context_reason.empty()) {
      rec["stream"]["no_context_reason"] = call.prepared.stream->no_context_reason;
    }
  }
  if (!error.empty()) rec["error"] = error;
  if (call.reply.redaction) {
    rec["redaction"] = {{"faces", (*call.reply.redaction)[0]}, {"plates", (*call.reply.redaction)[1]}};
  }
  if (call.filter) {
    rec["word_filter"] = call.filter->blocked() ? "block" : call.filter->matches() > 0 ? "mask" : "pass";
  }
  if (r != nullptr) {
    rec["finish_reason"] = r->finish_reason;
    rec["prompt_tokens"] = r->prompt_tokens;
    rec["completion_tokens"] = r->tokens.size();
    if (call.reply.trust) rec["trust_flagged"] = call.reply.trust->flagged;
  }
  if (s_.guard_->audit_prompts()) {
    json msgs = json::array();
    for (const api::ChatMessage& m : call.request.messages) msgs.push_back({{"role", m.role}, {"text", m.text}});
    rec["messages"] = msgs;
    if (r != nullptr) rec["output"] = r->text;
  }
  if (sampled) return s_.guard_->AuditRefusal(std::move(rec), call.remote_addr);
  return s_.guard_->Audit(std::move(rec));
}

void Server::Handlers::Reply(Call& call, const HttpRequest& req, HttpResponse& res) {
  // The scheduler enforces the deadline; the extra grace only guards against a stuck engine.
  const Clock::time_point give_up = call.prepared.input.deadline + std::chrono::seconds(5);
  // With a word filter the text is read as it comes, so that a blocked reply stops generating
  // at once; without one, only the end is awaited (no wake-up per token).
  std::string text;
  for (bool over = false; !over;) {
    // Wake a few times a second to see whether the client is still there: one that hung up
    // cancels its job, which frees its batch slot at the next step instead of at the end.
    over = call.job->Wait(std::min(give_up, Clock::now() + kDisconnectPoll),
                          call.filter ? &text : nullptr);
    if (call.filter) PassText(call, std::move(text));
    text.clear();
    if (!over && req.PeerClosed()) {
      call.job->Cancel();
      res.status = 499;  // for the access log and metrics
      // A half-closed client may still read: it gets this and the connection closes (the 499
      // said keep-alive).
      res.close = true;
      (void)AuditCall(call, 499, nullptr, "client_closed");
      Observe(call, 499);
      spdlog::info("{} {} -> client closed the connection before the reply", call.reply.id,
                   call.route);
      return;
    }
    if (!over && Clock::now() >= give_up) {
      call.job->Cancel();
      SendError(res, {504, "server_error", "deadline_exceeded", "the request did not finish in time"});
      (void)AuditCall(call, 504, nullptr, "deadline_exceeded");
      Observe(call, 504);
      return;
    }
  }
  if (!call.job->status().ok()) {
    const api::ApiError e = api::FromStatus(call.job->status());
    if (e.http_status == 503) res.set_header("Retry-After", "1");  // shutting down, out of memory
    SendError(res, e);
    (void)AuditCall(call, e.http_status, nullptr, e.code);
    Observe(call, e.http_status);
    spdlog::info("{} {} -> {} {}", call.reply.id, call.route, e.http_status, LogSafe(e.message));
    return;
  }
  std::string tail;
  if (!call.filter) call.sent_text = call.job->result().text;
  const JobResult r = Finalize(call, &tail);
  call.reply.latency_ms = SecondsSince(call.t0) * 1000.0;
  // Audit before the reply leaves: an answer that cannot be audited is not given.
  if (Status s = AuditCall(call, 200, &r, ""); !s.ok()) {
    SendError(res, {500, "server_error", "audit_unavailable", "the audit log cannot be written"});
    Observe(call, 500);
    return;
  }
  KeepStreamFrame(call, r);
  const auto& tok = call.model->engine().tokenizer();
  res.set_content(call.kind == Kind::kInvoke ? InvokeReply(call.reply, call.prepared, r, tok)
                                             : ChatReply(call.reply, call.prepared, r, tok),
                  "application/json");
  Observe(call, 200);
  spdlog::info("{} {} -> 200 prompt={} image={} completion={} {:.1f} ms", call.reply.id, call.route,
               r.prompt_tokens, r.image_tokens, r.tokens.size(), call.reply.latency_ms);
}

// Server-sent events: `data: <json>\n\n` per chunk, then `data: [DONE]`. Text passes the word
// filter first (which holds back a possible partial match across chunks). A write that fails
// (client gone), or a client found gone while nothing is sent, cancels the job, which frees its
// batch slot at the next decode step. The audit line is written before the final event (the text
// is out by then: see README "audit").
void Server::Handlers::Stream(std::shared_ptr<Call> call, const HttpRequest& req, HttpResponse& res) {
  res.set_header("Cache-Control", "no-cache");
  res.content_type = "text/event-stream";
  res.stream = [this, call, peer_closed = req.peer_closed](ChunkWriter& out) {
    auto send = [&](const std::string& payload) { return out.Write("data: " + payload + "\n\n"); };
    const auto& tok = call->model->engine().tokenizer();
    std::vector<StreamedToken> tokens;  // whose text the next chunk completes (stream_tokens)
    size_t tokens_sent = 0;
    auto send_text = [&](const std::string& text) {
      if (text.empty() && tokens.empty()) return !(peer_closed && peer_closed());
      const std::string payload =
          call->kind == Kind::kChat ? ChatChunk(call->reply, std::nullopt, text, tokens, &tok)
                                    : json{{"text", text}}.dump(-1, ' ', false, json::error_handler_t::replace);
      tokens_sent += tokens.size();
      tokens.clear();
      return send(payload);
    };
    bool ok = call->kind != Kind::kChat || send(ChatChunk(call->reply, "assistant", ""));
    const bool stream_tokens = call->prepared.input.stream_tokens;
    // As Reply's: the scheduler enforces the deadline; this guards against a stuck engine.
    const Clock::time_point give_up = call->prepared.input.deadline + std::chrono::seconds(5);
    bool over = false;
    while (ok && !over) {
      std::string text;
      over = call->job->Wait(std::min(give_up, Clock::now() + std::chrono::milliseconds(200)), &text,
                             stream_tokens ? &tokens : nullptr);
      ok = send_text(PassText(*call, std::move(text)));
      if (!over && Clock::now() >= give_up) break;
    }
    if (ok && !over) {  // past the give-up time: an error event, then the end, as for any error
      call->job->Cancel();
      const api::ApiError e{504, "server_error", "deadline_exceeded", "the request did not finish in time"};
      call->status = e.http_status;
      (void)AuditCall(*call, e.http_status, nullptr, e.code);
      send(api::ErrorBody(e));
      ok = send("[DONE]");
    } else if (ok) {
      call->reply.latency_ms = SecondsSince(call->t0) * 1000.0;
      if (!call->job->status().ok()) {
        // Headers (200) are already out: the error travels as an event, as OpenAI does.
        const api::ApiError e = api::FromStatus(call->job->status());
        call->status = e.http_status;
        (void)AuditCall(*call, e.http_status, nullptr, e.code);
        send(api::ErrorBody(e));
        spdlog::info("{} {} (stream) -> error {} {}", call->reply.id, call->route, e.http_status,
                     LogSafe(e.message));
      } else {
        std::string tail;
        JobResult r = Finalize(*call, &tail);
        // A client gone before the last of the text is a client_closed line (below), not a 200.
        if (!send_text(tail)) {
          call->job->Cancel();
          call->status = 499;
          (void)AuditCall(*call, 499, nullptr, "client_closed");
          Observe(*call, call->status);
          return;
        }
        spdlog::info("{} {} (stream) -> 200 prompt={} image={} completion={} {:.1f} ms", call->reply.id,
                     call->route, r.prompt_tokens, r.image_tokens, r.tokens.size(), call->reply.latency_ms);
        if (Status s = AuditCall(*call, 200, &r, ""); !s.ok()) {
          call->status = 500;
          send(api::ErrorBody({500, "server_error", "audit_unavailable", "the audit log cannot be written"}));
        } else if (call->kind == Kind::kChat) {
          send(ChatFinishChunk(call->reply, call->prepared, r, tok,
                               stream_tokens ? std::optional<size_t>(tokens_sent) : std::nullopt));
          if (call->request.include_usage) send(ChatUsageChunk(call->reply, r));
        } else {
          KeepStreamFrame(*call, r);  // audited: the frame joins its stream
          // The final event repeats the whole reply, as the client saw it (filtered).
          send(InvokeReply(call->reply, call->prepared, r, call->model->engine().tokenizer()));
        }
      }
      ok = send("[DONE]");
    }
    // A client gone before its reply's end is a 499 ("client closed request", nginx's), unless
    // its outcome was audited already: the audit line and the metric say the same.
    if (!ok && !call->audited) {
      call->job->Cancel();
      call->status = 499;
    }
    // A client that left before the end still gets its audit line.
    if (!call->audited) (void)AuditCall(*call, call->status, nullptr, "client_closed");
    Observe(*call, call->status);
  };
}

}  // namespace vlmd::serve
