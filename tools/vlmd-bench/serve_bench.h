// `vlmd-bench serve`: load on a running vlmd over HTTP. C client threads send N requests in all
// to POST /v1/vlm/invoke (multipart image + request JSON, temperature 0) and report throughput,
// latency percentiles, errors and the server's peak memory (its /metrics, scraped after the run);
// optionally again under a hostile load of slow and idle connections.
#pragma once

#include <string>

namespace vlmd::bench {

struct ServeBenchOptions {
  std::string url;                 // e.g. http://127.0.0.1:8080 (no path)
  int concurrency = 1;             // client threads, each with its own connection
  int requests = 8;                // total requests over all threads
  std::string image_path;          // the image sent with every request
  std::string prompt = "Describe the image.";
  int max_tokens = 16;
  // Each request gets a different image: the --image pixels with the request index written into
  // the low bits of the first pixels, re-encoded as PNG before the run (not timed). Defeats the
  // server's visual-embedding cache, which is keyed by decoded pixels.
  bool distinct_images = false;
  std::string api_key;             // sent as Authorization: Bearer KEY when not empty
  int timeout_s = 600;             // per-request read timeout
  bool json = false;               // print one JSON object instead of the table
  // Hostile load (hostile_load.h): with either > 0 the requests run twice, first alone, then
  // while this many slow and idle connections are held open, and the report gives the loaded
  // P50/P99 as ratios of the unloaded ones. The URL must then be http://<IPv4 loopback>:<port>.
  int slow_clients = 0;
  int idle_clients = 0;
  int hostile_warmup_s = 12;       // held this long before the loaded run (past the deadlines)
};

// Runs the benchmark and prints the result to stdout. Returns 0 when it ran (even with request
// errors: they are counted in the report), 2 on bad options or an unreadable image, 1 when the
// server could not be reached at all. Not thread-safe across concurrent calls (prints to stdout).
int RunServeBench(const ServeBenchOptions& opts);

}  // namespace vlmd::bench
