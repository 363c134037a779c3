// Registration of the server's metrics (names and buckets are part of the API: dashboards use them).
#include "serve/server_metrics.h"

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
                                       "Images that failed to decode, preprocess or encode")),
      embedding_cache_hits(r->AddCounter("vlm_embedding_cache_hits_total",
                                         "Visual-embedding cache lookups that hit")),
      embedding_cache_queries(r->AddCounter("vlm_embedding_cache_queries_total",
                                            "Visual-embedding cache lookups")),
      request_duration(r->AddHistogram("vlm_request_duration_seconds",
                                       "Request latency from arrival to the last byte",
                                       {"route", "status"},
                                       {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60})),
      requests(r->AddCounter("vlm_requests_total", "Requests by route and HTTP status",
                             {"route", "status"})),
      prompt_tokens(r->AddCounter("vlm_prompt_tokens_total", "Prompt rows prefilled (text + image)")),
      generated_tokens(r->AddCounter("vlm_generated_tokens_total", "Tokens generated")),
      queue_depth(r->AddGauge("vlm_queue_depth", "Jobs waiting for a batch slot")),
      batch_size(r->AddGauge("vlm_batch_size", "Sequences decoded in the last batched step")),
      decode_steps(r->AddCounter("vlm_decode_steps_total", "Batched decode steps run")),
      prefix_reused_tokens(r->AddCounter("vlm_prefix_reused_tokens_total",
                                         "Prompt rows whose KV came from an earlier request")),
      memory_bytes(r->AddGauge("vlm_memory_bytes", "Memory by kind", {"kind"})),
      process_rss(r->AddGauge("vlm_process_rss_bytes", "Resident set size of the server process")),
      process_peak_rss(r->AddGauge("vlm_process_peak_rss_bytes",
                                   "Peak resident set size of the server process")) {}

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
