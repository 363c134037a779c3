// Registration of the server's metrics (names and buckets are part of the API: dashboards use them).
#include "serve/obs/server_metrics.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace vlmd::serve {

ServerMetrics::ServerMetrics(obs::Registry* r)
    : embedding_duration(r->AddHistogram(
          "vlm_embedding_duration_seconds",
          "Image decode + preprocess + encode time per image (cache misses)", {}, {0.1, 0.5, 1, 5})),
      embedding_success(r->AddCounter("vlm_embedding_success_total", "Images encoded successfully")),
      embedding_failures(r->AddCounter("vlm_embedding_failures_total",
                                       "Images whose encoding failed (an image that does not "
                                       "decode is the request's 4xx, in vlm_requests_total)")),
      embedding_cache_hits(r->AddCounter("vlm_embedding_cache_hits_total",
                                         "Visual-embedding cache lookups that hit")),
      embedding_cache_queries(r->AddCounter("vlm_embedding_cache_queries_total",
                                            "Visual-embedding cache lookups")),
      request_duration(r->AddHistogram("vlm_request_duration_seconds",
                                       "Request latency from arrival to the last byte",
                                       {"route", "status"},
                                       {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300})),  // --timeout: 300 s
      requests(r->AddCounter("vlm_requests_total", "Requests by route and HTTP status",
                             {"route", "status"})),
      prompt_tokens(r->AddCounter("vlm_prompt_tokens_total",
                                  "Prompt rows of started requests (text + image; rows reused from an "
                                  "earlier request included, see vlm_prefix_reused_tokens_total)")),
      generated_tokens(r->AddCounter("vlm_generated_tokens_total", "Tokens generated")),
      queue_depth(r->AddGauge("vlm_queue_depth", "Jobs waiting for a batch slot (all models)")),
      batch_size(r->AddGauge("vlm_batch_size", "Sequences in each model's last batched decode step, summed over models")),
      decode_steps(r->AddCounter("vlm_decode_steps_total", "Batched decode steps run")),
      prefix_reused_tokens(r->AddCounter("vlm_prefix_reused_tokens_total",
                                         "Prompt rows whose KV came from an earlier request")),
      memory_bytes(r->AddGauge("vlm_memory_bytes", "Memory by kind, summed over the loaded models", {"kind"})),
      memory_planned_bytes(r->AddGauge(
          "vlm_memory_planned_bytes",
          "Most memory the served models may hold (weights, K/V at full batch and context, image "
          "caches) and the stream windows' limit")),
      memory_budget_bytes(r->AddGauge("vlm_memory_budget_bytes",
                                      "Memory budget the served models' plans must fit (0: none)")),
      process_rss(r->AddGauge("vlm_process_rss_bytes", "Resident set size of the server process")),
      process_peak_rss(r->AddGauge("vlm_process_peak_rss_bytes",
                                   "Peak resident set size of the server process")),
      policy_decisions(r->AddCounter("vlm_policy_decisions_total",
                                     "Guard-rail decisions by policy and outcome",
                                     {"policy", "decision"})),
      route_tier(r->AddCounter("vlm_route_tier_total", "Complexity-routed requests by tier",
                               {"route", "tier"})),
      route_version(r->AddCounter("vlm_route_version_total",
                                  "Requests by route and the model version that served them",
                                  {"route", "model", "version"})),
      complexity_score(r->AddHistogram("vlm_complexity_score",
                                       "Input complexity scores of complexity-routed requests",
                                       {"route"}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9})),
      trust_flagged(r->AddCounter("vlm_trust_flagged_total",
                                  "Replies flagged by the trust signals (high mean entropy)")),
      model_reloads(r->AddCounter("vlm_model_reloads_total", "Hot swaps by model and result",
                                  {"model", "result"})),
      trace_spans(r->AddCounter("vlm_trace_spans_total",
                                "Spans sent to the OTLP endpoint, or dropped (queue full, post failed)",
                                {"result"})),
      streams(r->AddGauge("vlm_streams", "Camera/video streams (stream_id) with a frame window")),
      stream_bytes(r->AddGauge("vlm_stream_window_bytes",
                               "Visual tokens of earlier frames kept for the streams")),
      stream_context_frames(r->AddCounter("vlm_stream_context_frames_total",
                                          "Earlier frames of a stream put before a new one")),
      stream_no_context(r->AddCounter("vlm_stream_frames_without_context_total",
                                      "Stream frames whose prompt got no earlier frame, by reason",
                                      {"reason"})),
      http_connections(r->AddGauge("vlm_http_connections", "HTTP connections open")),
      http_queued(r->AddGauge("vlm_http_queued_requests", "Requests waiting for a handler thread, and heads for their check")),
      http_refusals(r->AddCounter("vlm_http_refusals_total",
                                  "Requests the connection layer refused itself, by reason",
                                  {"reason"})),
      http_dropped(r->AddCounter("vlm_http_dropped_connections_total",
                                 "Connections closed without a reply, by reason", {"reason"})),
      http_tls_reloads(r->AddCounter("vlm_http_tls_reloads_total",
                                     "TLS certificate reloads after the files changed, by result", {"result"})),
      drift_score(r->AddGauge("vlm_drift_score",
                              "Population stability index of a reply statistic in a window against the "
                              "version's baseline (NaN: too few replies to score)",
                              {"model", "version", "stat", "window"})),
      drift_alarms(r->AddCounter("vlm_drift_alarms_total",
                                 "Drift alarms raised (a score crossing the threshold)",
                                 {"model", "version", "stat", "window"})),
      drift_baseline_requests(r->AddGauge("vlm_drift_baseline_requests",
                                          "Replies in the version's drift baseline (0: still collecting)",
                                          {"model", "version"})),
      drift_webhooks(r->AddCounter("vlm_drift_webhook_events_total",
                                   "Drift webhook events by outcome", {"result"})),
      redactions(r->AddCounter("vlm_redactions_total",
                               "Regions covered before inference, by kind (faces, plates)", {"kind"})),
      redact_duration(r->AddHistogram("vlm_redact_duration_seconds",
                                      "Face and plate detection time per request (all its images)", {},
                                      {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1})) {
  stream_no_context.With({"lost"});  // at 0, so that increase() sees the first lost stream
}

void ServerMetrics::UpdateProcessMemory() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    // "VmRSS:	  123456 kB"
    const bool rss = line.rfind("VmRSS:", 0) == 0, hwm = line.rfind("VmHWM:", 0) == 0;
    if (!rss && !hwm) continue;
    const double bytes = std::strtod(line.c_str() + 6, nullptr) * 1024.0;
    (rss ? process_rss : process_peak_rss).With().Set(bytes);
  }
}

}  // namespace vlmd::serve
