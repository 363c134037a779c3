// Internal to the server: the route handlers (server.cpp registers them; generation lives in
// server_generate.cpp, admin endpoints in server_admin.cpp) and what the connection layer asks
// of the server (FrontHandler: authentication before a body is read, routing, front refusals).
// One instance per Server, called concurrently from the handler threads.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "serve/api/errors.h"
#include "serve/hosting/job.h"
#include "serve/hosting/prepare_job.h"
#include "serve/http/guard.h"
#include "serve/http/http_front.h"
#include "serve/http/http_message.h"
#include "serve/http/responses.h"
#include "serve/http/server.h"
#include "serve/obs/trace.h"

namespace vlmd::serve {

// Admin request bodies are small JSON objects.
inline constexpr size_t kAdminBodyLimit = 1 << 20;

class Server::Handlers : public FrontHandler {
 public:
  explicit Handlers(Server* s) : s_(*s) {}

  // The routes (admin ones only with an admin key). Before the front starts.
  void Register();
  void RegisterAdmin();

  // FrontHandler: authentication and routing on the head, the route's handler on the request.
  bool OnHead(HttpRequest& head, HttpResponse& res, size_t* body_limit) override;
  void OnRequest(HttpRequest& req, HttpResponse& res) override;
  HttpResponse FrontRefusal(const HttpRequest* head, int status, std::string_view code,
                            std::string_view message) override;
  void AuditFrontRefusal(const HttpRequest& head, const HttpResponse& res, int status,
                         std::string_view code) override;
  void LeaveOutFrontRefusal(const HttpRequest& head) override;
  void OnDropped(std::string_view reason) override;
  // /health and /ready (GET or HEAD) on the health lane, /metrics on its own: probes that long
  // generations, or a flood of the other kind, must not delay.
  Lane LaneOf(const HttpRequest& head) const override;
  void OnConnections(size_t open) override;
  void OnTlsReload(bool ok) override;

 private:
  using RouteFn = std::function<void(HttpRequest&, HttpResponse&)>;
  // server_admin.cpp: the "requested" audit line of an admin action; false (and a 500 in `res`)
  // when it cannot be written, and the action must not happen.
  bool AuditAdminIntent(nlohmann::json record, HttpResponse& res);
  // Its outcome line, `record` with "status"; false (and a 500 in `res`) when it cannot be written.
  bool AuditAdminOutcome(nlohmann::json record, int status, HttpResponse& res);
  struct Route {
    std::string method;
    std::regex pattern;  // the whole path; capture groups go to HttpRequest::matches
    size_t body_limit;   // bytes of body read (413 beyond)
    RouteFn handle;
  };
  void Get(const std::string& pattern, RouteFn fn) { routes_.push_back({"GET", std::regex(pattern), 0, std::move(fn)}); }
  void Post(const std::string& pattern, size_t body_limit, RouteFn fn) {
    routes_.push_back({"POST", std::regex(pattern), body_limit, std::move(fn)});
  }
  // The route for a request; null with *status 404 (no such path) or 405 (not this method).
  const Route* FindRoute(const std::string& method, const std::string& path,
                         std::vector<std::string>* matches, int* status) const;
  // The methods of the routes whose pattern matches `path` ("POST", "GET, HEAD"), for a 405's
  // Allow header.
  std::string AllowedMethods(const std::string& path) const;
  // Authentication and rate limits before the body is read: false and `res` set when refused.
  bool Admit(HttpRequest& head, HttpResponse& res);

  enum class Kind { kInvoke, kChat };
  struct Call {  // one generation request in flight
    Kind kind;
    std::string route;          // HTTP path
    Clock::time_point t0;
    std::string remote_addr;
    Client client;
    std::shared_ptr<ModelHost> model;
    api::GenerationRequest request;
    std::vector<std::string> image_hashes;  // SHA-256 of the encoded images (audit)
    const char* allowlist_decision = "none";  // Guard::CheckImages
    int status = 200;            // the final status of a stream (error event, 499 on disconnect)
    mutable bool audited = false;  // AuditCall ran (set from the const AuditCall)
    // The first image as complexity routing decoded it (full size), for PrepareJob.
    std::optional<DecodedImage> routed_image;
    PreparedJob prepared;
    std::shared_ptr<Job> job;
    ReplyContext reply;
    std::unique_ptr<policy::StreamFilter> filter;  // nullptr: no word filter
    std::string sent_text;       // streamed text so far (after the filter)
    std::shared_ptr<void> in_flight;  // counts the call in Server::in_flight_ until destroyed
    // Tracing (SPEC O2): the trace this call belongs to, the caller's span (zero when the trace
    // started here), this request's server span, whether the trace is recorded.
    obs::TraceId trace_id{};
    obs::SpanId parent_span{};
    obs::SpanId span_id{};
    bool sampled = false;
    Clock::time_point prepare_t0{}, prepare_t1{};   // image decode + preprocess (PrepareJob)
    std::string stream_key;  // the stream's window (client, model files, stream_id); "" : none
  };

  void Generate(Kind kind, const HttpRequest& req, HttpResponse& res);
  // Picks the host for call->request.model (a model, a split route or a tier route).
  std::optional<api::ApiError> Resolve(Call* call);
  void Reply(Call& call, const HttpRequest& req, HttpResponse& res);
  void Stream(std::shared_ptr<Call> call, const HttpRequest& req, HttpResponse& res);
  // New generated text through the word filter (when configured) into call.sent_text; cancels
  // the job when the filter blocks. Returns what may be sent now.
  std::string PassText(Call& call, std::string text);
  // The finished job's result as the client sees it: the filter flushed (the released remainder
  // in *tail, already in sent_text), text = sent_text, finish_reason content_filter when
  // blocked, logprobs withheld when they would spell a filtered word, trust signals set.
  JobResult Finalize(Call& call, std::string* tail);
  // Counts a finished reply in the drift statistics of its model version.
  void RecordDrift(const Call& call, const JobResult& r);
  // Whether the logprobs would show a filtered word: in the generated tokens' pieces, or an
  // alternative that is one or finishes one with the text before it.
  bool LogprobsShowAFilteredWord(const Call& call, const JobResult& r) const;
  // One audit line for the call; `r` is null for a request that failed before generating.
  // `sampled`: a refusal written like those before authentication, at most one line per client
  // address and interval (policy/refusal_sampler.h), so that refusals cannot flood the trail.
  Status AuditCall(const Call& call, int status, const JobResult* r, const std::string& error,
                   bool sampled = false);
  // Once per call, at its end: request metrics, and its spans to the exporter.
  void Observe(const Call& call, int status);
  // Reads the traceparent header (or starts a trace) and sets the traceresponse header.
  void StartTrace(Call* call, const HttpRequest& req, HttpResponse& res);
  // The server span and, when the job ran, its phases' spans (decode-image, encode, prefill,
  // decode) to the exporter, if the call is sampled and an endpoint is set.
  void ExportSpans(const Call& call, int status);
  // A stream request that succeeded: its frame's visual tokens join the stream's window.
  void KeepStreamFrame(const Call& call, const JobResult& r);
  std::string NextId() { return s_.NextRequestId(); }

  Server& s_;
  std::vector<Route> routes_;
};

void SendError(HttpResponse& res, const api::ApiError& e);
// `text` with control characters escaped (\xNN): request-derived strings in log lines cannot
// forge lines of their own.
std::string LogSafe(std::string_view text);
double SecondsSince(Clock::time_point t0);

}  // namespace vlmd::serve
