// Everything the Server is configured with: HTTP limits, request limits, job preparation, and
// the guard rails (keys, allowlist, word filter, audit, trust). Plain values; filled from the
// command line and/or the config file (config.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "serve/api/requests.h"
#include "serve/hosting/prepare_job.h"
#include "serve/hosting/stream_window.h"
#include "serve/policy/word_filter.h"
#include "serve/redact/redactor.h"

namespace vlmd::serve {

enum class AllowlistMode { kOff, kReport, kEnforce };  // report: log + count, never refuse

struct GuardOptions {
  // Client authentication: a single key (--api-key) and/or a keys file with ids and rate
  // limits (policy/api_keys.h). Both empty: /v1/* is open.
  std::string api_key;
  std::string api_keys_file;
  // Admin endpoints (/admin/...) exist only when set; clients' keys never open them.
  std::string admin_key;
  // SHA-256 of the encoded image bytes, one per line; reloaded when the file changes.
  std::string image_allowlist_file;
  AllowlistMode allowlist_mode = AllowlistMode::kEnforce;
  // Output word filter: words from the file and/or the list; mask or block.
  std::string word_filter_file;
  std::vector<std::string> filter_words;
  policy::FilterAction filter_action = policy::FilterAction::kMask;
  std::string filter_mask = "***";
  // Audit log (one JSON line per request); empty path: off.
  std::string audit_path;
  uint64_t audit_max_bytes = 64ull << 20;
  int audit_keep_files = 5;
  bool audit_fsync = false;
  bool audit_prompts = false;  // prompt text is logged only when this is set
  // Refusals before authentication: per client address and interval of this many seconds, the
  // first is written and the rest summarized in one line (policy/refusal_sampler.h); 0: all.
  double audit_refusal_interval_s = 10;
  // Trust signals: a reply is flagged when its mean token entropy exceeds this (bits; <= 0: never).
  double trust_flag_entropy_bits = 4.0;
};

// Distributed tracing (SPEC O2). The `traceparent` header of a request is always honoured (its
// trace continues; the reply's `traceresponse` header names the server's span); spans are sent
// only when an OTLP endpoint is set.
struct TracingOptions {
  std::string otlp_endpoint;  // e.g. http://otel-collector:4318/v1/traces; empty: no export
  // Share of requests without a (valid) traceparent that start a recorded trace; a request with
  // one follows its sampled flag.
  double sample_ratio = 1.0;
};

// Drift alarms (issue 23 part 3; policy/drift.h, http/drift_monitor.h): per model version, the
// statistics of its replies in rolling windows against a baseline, scored with the population
// stability index. Off unless `enabled`.
struct DriftWindow {
  std::string name;  // the `window` label, as configured ("1h")
  double seconds = 0;
};

struct DriftOptions {
  bool enabled = false;
  std::vector<DriftWindow> windows = {{"1h", 3600}, {"24h", 86400}};
  // The first this many replies of a version form its baseline (unless a baseline file exists);
  // the admin action takes the latest this many.
  int baseline_requests = 1000;
  // A statistic is scored only when the window and the baseline each hold this many replies
  // showing it. PSI of same-distribution samples is about chi-square(bins - 1) / n_eff with
  // n_eff = 1 / (1/n + 1/N): with 12 bins, n = 200 and N = 1000 crossing 0.25 by chance has a
  // probability near 2e-5 per check (n = 100, N = 500: ~4%).
  int min_requests = 200;
  double threshold = 0.25;  // PSI over this raises the alarm; it clears under 0.8 x this
  // Where baseline files live (<dir>/<model>@<version>.json): read when a version loads, written
  // by POST /admin/models/{name}/baseline. Empty: baselines live in memory only.
  std::string baseline_dir;
  std::string webhook_url;  // alarms (and their clearing) are POSTed here; empty: none
  int webhook_timeout_s = 5;
  int webhook_retries = 3;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (tests)
  // Requests handled at once (handler threads). Connections are not threads: one I/O thread
  // holds them all (serve/http/http_front.h), within the caps below.
  int http_threads = 64;
  int max_connections = 8192;              // open at once; beyond: 503 and close
  int max_connections_per_address = 256;   // from one client address (0: no cap; behind a proxy)
  size_t max_body_bytes = 32u << 20;   // larger bodies get 413
  // Request body bytes held at once over all connections (0: no bound); a body that does not fit
  // gets 503 body_budget (serve/http/http_front.h, FrontOptions::max_body_bytes_in_flight).
  uint64_t body_budget_bytes = 1ull << 30;
  // Decoded image bytes in flight across requests (engine/image/decode_budget.h; 0: no bound):
  // a request whose image does not fit waits up to decode_wait, then gets 503.
  uint64_t decode_budget_bytes = 1ull << 30;
  std::chrono::milliseconds decode_wait{10000};
  int read_timeout_s = 10;             // a whole request head, from its first byte (else 408)
  int body_timeout_s = 60;             // a whole request body, from the end of its head (else 408)
  int write_timeout_s = 30;            // one write of a reply or of a streamed chunk
  int keep_alive_s = 5;                // a connection with no request started closes after this
  // HTTPS: PEM certificate chain and private key (both or neither). Reloaded when either file
  // changes (checked every tls_reload_interval); a pair that does not load leaves the old one.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::chrono::milliseconds tls_reload_interval{10000};
  api::RequestLimits limits;           // limits.url_host_allowlist: hosts image URLs may name
  int image_fetch_timeout_s = 10;      // connect / read timeout when fetching an image URL
  PrepareOptions prepare;
  GuardOptions guard;
  // Memory budget over all served models (SPEC S9; 0: none): a model whose MemoryPlan would take
  // the sum of the loaded models' plans and the stream windows' limit (streams.max_bytes) past it
  // is refused, at start-up and on a reload (where both versions count: they serve side by side
  // until the old one's requests finish).
  uint64_t memory_budget_bytes = 0;
  TracingOptions tracing;
  StreamOptions streams;  // camera / video streams (stream_id): the windows' limits
  DriftOptions drift;
  // Redaction before inference for every model (config "policies.redact"; a model's or a
  // route's own "redact" replaces it). Off by default.
  redact::RedactOptions redact;
  // Requests whose images are being redacted at once, over every model and route (the detectors
  // run on the handler threads, one core each; 0: one per core). A request that finds them all
  // busy waits up to redaction_wait, then gets 429 with Retry-After; when as many wait already,
  // it gets the 429 at once.
  int max_concurrent_redactions = 0;
  std::chrono::milliseconds redaction_wait{5000};
};

}  // namespace vlmd::serve
