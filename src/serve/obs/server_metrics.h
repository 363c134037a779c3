// The server's Prometheus metrics (SPEC O1, issue 5), registered once; handlers and the
// scheduler update them from any thread (obs metrics are thread-safe).
#pragma once

#include "serve/obs/metrics.h"

namespace vlmd::serve {

struct ServerMetrics {
  explicit ServerMetrics(obs::Registry* r);

  // Image decode + preprocess + encode of one image (cache hits are not observed).
  obs::HistogramFamily& embedding_duration;
  obs::CounterFamily& embedding_success;
  obs::CounterFamily& embedding_failures;
  obs::CounterFamily& embedding_cache_hits;
  obs::CounterFamily& embedding_cache_queries;
  obs::HistogramFamily& request_duration;  // {route, status}
  obs::CounterFamily& requests;            // {route, status}
  obs::CounterFamily& prompt_tokens;
  obs::CounterFamily& generated_tokens;
  obs::GaugeFamily& queue_depth;
  // The gauges below sum over every model's scheduler (each adds its share; Scheduler::GaugeShare).
  obs::GaugeFamily& batch_size;            // sequences in each model's last decode step
  obs::CounterFamily& decode_steps;
  obs::CounterFamily& prefix_reused_tokens;  // prompt rows not recomputed (prefix reuse)
  obs::GaugeFamily& memory_bytes;          // {kind = weights | kv | activations | image_cache}
  // SPEC S9: the sum of the served models' memory plans (ModelHost::memory_plan) and the budget
  // they must fit (0: none).
  obs::GaugeFamily& memory_planned_bytes;
  obs::GaugeFamily& memory_budget_bytes;
  obs::GaugeFamily& process_rss;           // resident set now / at peak (from /proc/self/status)
  obs::GaugeFamily& process_peak_rss;
  // Guard rails (issue 6): every decision of every policy, e.g. {allowlist, deny}, {auth, allow},
  // {rate_limit, deny}, {word_filter, mask}, {audit, written}.
  obs::CounterFamily& policy_decisions;     // {policy, decision}
  obs::CounterFamily& route_tier;           // {route, tier}: complexity-routed requests
  obs::CounterFamily& route_version;        // {route, model, version}: where requests went
  obs::HistogramFamily& complexity_score;   // {route}
  obs::CounterFamily& trust_flagged;        // replies whose trust signals were flagged
  obs::CounterFamily& model_reloads;        // {model, result = ok | failed}
  obs::CounterFamily& trace_spans;          // {result = exported | dropped} (SpanExporter)
  // Streams (SPEC S6): streams with a window and the visual tokens they keep (both read when
  // /metrics is rendered), earlier frames put into prompts.
  obs::GaugeFamily& streams;
  obs::GaugeFamily& stream_bytes;
  obs::CounterFamily& stream_context_frames;
  // Frames whose prompt got no earlier frame, by reason (StreamPart::no_context_reason); "lost"
  // counts streams a client continued here after a restart, rebalance or hot swap.
  obs::CounterFamily& stream_no_context;
  // The connection layer (serve/http/http_front.h): connections open now, requests it refused
  // itself by reason (head_timeout, payload_too_large, too_many_connections, ...), connections
  // it dropped without a reply by reason (idle_reaped, write_timeout, accept_failed).
  obs::GaugeFamily& http_connections;
  obs::GaugeFamily& http_queued;  // requests read and waiting for a handler thread
  obs::CounterFamily& http_refusals;
  obs::CounterFamily& http_dropped;
  obs::CounterFamily& http_tls_reloads;  // {result = ok | failed}
  // Drift alarms (serve/http/drift_monitor.h): PSI per statistic and window against the
  // version's baseline (NaN: not scored), alarms raised, the baseline's size, webhook outcomes.
  obs::GaugeFamily& drift_score;             // {model, version, stat, window}
  obs::CounterFamily& drift_alarms;          // {model, version, stat, window}
  obs::GaugeFamily& drift_baseline_requests; // {model, version}: 0 while being collected
  obs::CounterFamily& drift_webhooks;        // {result = sent | failed | dropped}
  // Redaction before inference (serve/redact): regions covered by kind, detection time per image.
  obs::CounterFamily& redactions;            // {kind = faces | plates}
  obs::HistogramFamily& redact_duration;

  // Refreshes the process gauges (called before each /metrics render).
  void UpdateProcessMemory();
};

}  // namespace vlmd::serve
