// Tracing of the generation endpoints (SPEC O2): the W3C traceparent of a request, and its
// spans: the server span of the request, with children for the image decode + preprocess
// (decode-image), the encoder (encode), the prompt (prefill) and generation (decode).

#include <chrono>

#include "serve/http/server_handlers.h"

namespace vlmd::serve {
namespace {

using obs::Attribute;
using obs::Span;

// "WxH" of each image, comma-separated (source sizes, before preprocessing).
std::string Resolutions(const JobInput& in) {
  std::string s;
  for (const auto& img : in.images) {
    if (!s.empty()) s += ",";
    s += std::to_string(img.source_width) + "x" + std::to_string(img.source_height);
  }
  return s;
}

}  // namespace

void Server::Handlers::StartTrace(Call* call, const HttpRequest& req, HttpResponse& res) {
  call->span_id = obs::NewSpanId();
  // Several traceparent headers are invalid (W3C): the trace starts here then.
  std::optional<obs::TraceParent> parent;
  if (req.header_count("traceparent") == 1) {
    parent = obs::ParseTraceParent(std::string(req.header("traceparent")));
  }
  if (parent) {
    call->trace_id = parent->trace_id;
    call->parent_span = parent->parent_id;
    call->sampled = parent->sampled();
  } else {
    call->trace_id = obs::NewTraceId();
    call->sampled = obs::SampledByRatio(call->trace_id, s_.options_.tracing.sample_ratio);
  }
  // W3C Trace Context level 2: the server's span, for a client that logs it.
  res.set_header("traceresponse",
                 obs::FormatTraceParent(call->trace_id, call->span_id, call->sampled ? 1 : 0));
}

void Server::Handlers::ExportSpans(const Call& call, int status) {
  if (!call.sampled || s_.exporter_ == nullptr) return;
  // Steady-clock instants to wall-clock nanoseconds, through one pair of readings.
  const auto wall_now = std::chrono::system_clock::now();
  const Clock::time_point now = Clock::now();
  auto unix_ns = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(wall_now.time_since_epoch() -
                                                                (now - t))
        .count();
  };
  std::vector<Span> spans;
  Span server;
  server.name = "POST " + call.route;
  server.trace_id = call.trace_id;
  server.span_id = call.span_id;
  server.parent_id = call.parent_span;
  server.kind = obs::SpanKind::kServer;
  server.start_unix_ns = unix_ns(call.t0);
  server.end_unix_ns = unix_ns(now);
  server.attributes = {{"http.request.method", std::string("POST")},
                       {"http.route", call.route},
                       {"http.response.status_code", int64_t{status}},
                       {"vlm.request_id", call.reply.id}};
  if (call.model) {
    server.attributes.push_back({"vlm.model", call.model->spec().name});
    server.attributes.push_back({"vlm.model.version", call.model->spec().version});
  }
  if (!call.reply.route.empty()) server.attributes.push_back({"vlm.route", call.reply.route});
  if (status >= 500) {  // OpenTelemetry's HTTP server convention: 4xx is the client's error
    server.error = true;
    server.status_message = "HTTP " + std::to_string(status);
  }
  auto child = [&](const char* name, Clock::time_point t0, Clock::time_point t1,
                   std::vector<Attribute> attributes) {
    Span s;
    s.name = name;
    s.trace_id = call.trace_id;
    s.span_id = obs::NewSpanId();
    s.parent_id = call.span_id;
    s.start_unix_ns = unix_ns(t0);
    s.end_unix_ns = unix_ns(t1);
    s.attributes = std::move(attributes);
    spans.push_back(std::move(s));
  };
  const JobInput& in = call.prepared.input;
  if (!call.request.images.empty() && call.prepare_t1 != Clock::time_point{}) {
    if (!in.images.empty()) {
      child("decode-image", call.prepare_t0, call.prepare_t1,
            {{"image_resolution", Resolutions(in)}, {"images", int64_t(in.images.size())}});
    } else {  // the images (or the prompt around them) could not be prepared: the reply says why
      child("decode-image", call.prepare_t0, call.prepare_t1,
            {{"images", int64_t(call.request.images.size())}});
      spans.back().error = true;
      spans.back().status_message = "image preparation failed (HTTP " + std::to_string(status) + ")";
    }
  }
  if (const auto& red = call.prepared.redaction) {
    child("redact", call.prepared.redact_start, call.prepared.redact_end,
          {{"faces", int64_t{red->faces}}, {"plates", int64_t{red->plates}}, {"detect_ms", red->detect_ms}});
  }
  // The job's phases, once it is over (its result is the scheduler's until then).
  if (call.job && call.job->done() && call.job->status().ok()) {
    const JobResult& r = call.job->result();
    if (r.encode_start != Clock::time_point{}) {
      child("encode", r.encode_start, r.encode_end,
            {{"image_resolution", Resolutions(in)}, {"visual_tokens", r.image_tokens},
             {"encode_ms", r.encode_ms}});
    }
    if (r.prefill_start != Clock::time_point{}) {
      child("prefill", r.prefill_start, r.decode_start,
            {{"prompt_tokens", r.prompt_tokens}, {"visual_tokens", r.image_tokens},
             {"reused_prompt_tokens", r.reused_prompt_tokens}, {"prefill_ms", r.prefill_ms}});
      if (call.prepared.stream) {
        spans.back().attributes.push_back(
            {"stream_context_frames", int64_t{call.prepared.stream->context_frames}});
      }
    }
    if (r.decode_end != Clock::time_point{}) {
      child("decode", r.decode_start, r.decode_end,
            {{"output_tokens", int64_t(r.tokens.size())}, {"finish_reason", r.finish_reason}});
    }
  }
  spans.insert(spans.begin(), std::move(server));
  s_.exporter_->Export(std::move(spans));
}

}  // namespace vlmd::serve
