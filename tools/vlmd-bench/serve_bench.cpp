// `vlmd-bench serve` (see serve_bench.h). Latency is measured per request around the HTTP call
// alone (connect + upload + generation + reply); throughput is successful requests over the wall
// time from the first request sent to the last reply. The server's peak memory is its
// process-lifetime peak RSS (VmHWM), so it includes model loading and earlier runs.
#include "serve_bench.h"

#include "hostile_load.h"

#include <png.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/read_file.h"
#include "core/status.h"
#include "engine/image/image.h"

namespace vlmd::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  double ms = 0;
  bool ok = false;
};

// One measured run: the successful requests' latencies (sorted) and what failed.
struct Run {
  std::vector<double> ok_ms;
  int errors = 0;
  double wall_s = 0;
  double throughput = 0;  // successful requests per second of wall time
  std::string first_error;
};

// Host and port of "http://<IPv4>:<port>" (a trailing slash allowed).
bool LoopbackEndpoint(const std::string& url, std::string* host, int* port) {
  const std::string prefix = "http://";
  if (url.rfind(prefix, 0) != 0) return false;
  std::string rest = url.substr(prefix.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  *host = rest.substr(0, colon);
  char* end = nullptr;
  const long p = std::strtol(rest.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 1 || p > 65535) return false;
  *port = static_cast<int>(p);
  return host->rfind("127.", 0) == 0;
}

// "model name" of the first CPU in /proc/cpuinfo; the CPUID brand string if that has none.
std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  const std::string& brand = GetCpuFeatures().brand;
  return brand.empty() ? "unknown" : brand;
}

Result<std::string> ReadFile(const std::string& path) {
  VLMD_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  if (bytes.empty()) return InvalidArgumentError(path + " is empty");
  return bytes;
}

// 8-bit RGB PNG of `img` (libpng, default compression).
Result<std::string> EncodePng(const engine::image::Image& img) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return InternalError("libpng: out of memory");
  }
  std::string out;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return InternalError("libpng: cannot encode the image");
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<const char*>(data), n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(img.width), static_cast<png_uint_32>(img.height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int32_t y = 0; y < img.height; ++y) {
    png_write_row(png, const_cast<png_bytep>(img.rgb.data() + static_cast<size_t>(y) * img.width * 3));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// `n` PNGs with the pixels of `encoded`, the i-th carrying i in the least significant bits of its
// first (up to 32) channel bytes: visually the same image, but distinct decoded pixels, so each
// misses the server's embedding cache (keyed by pixels).
Result<std::vector<std::string>> DistinctImages(const std::string& encoded, int n) {
  const auto* data = reinterpret_cast<const uint8_t*>(encoded.data());
  engine::image::DecodeLimits limits;
  limits.max_bytes = encoded.size();
  VLMD_ASSIGN_OR_RETURN(engine::image::Image base,
                        engine::image::DecodeImage(std::span<const uint8_t>(data, encoded.size()), limits));
  const size_t bits = std::min<size_t>(32, base.rgb.size());
  if (bits < 32 && static_cast<uint64_t>(n) > (uint64_t{1} << bits)) {
    return InvalidArgumentError("the image is too small to make " + std::to_string(n) + " distinct copies");
  }
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  engine::image::Image img = base;
  for (int i = 0; i < n; ++i) {
    for (size_t b = 0; b < bits; ++b) {
      img.rgb[b] = static_cast<uint8_t>((base.rgb[b] & 0xFE) | ((static_cast<uint32_t>(i) >> b) & 1u));
    }
    VLMD_ASSIGN_OR_RETURN(std::string png, EncodePng(img));
    out.push_back(std::move(png));
  }
  return out;
}

httplib::Headers AuthHeaders(const std::string& api_key) {
  if (api_key.empty()) return {};
  return {{"Authorization", "Bearer " + api_key}};
}

// Value of the unlabelled sample `name` in a Prometheus text exposition, if present.
std::optional<double> ScrapeGauge(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;  // a longer metric name that starts the same
    const size_t value_at = line.find_last_of(' ');
    if (value_at == std::string::npos) continue;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + value_at + 1, &end);
    if (end != line.c_str() + value_at + 1 && std::isfinite(v)) return v;
  }
  return std::nullopt;
}

// Percentile p (0..100) of sorted `v`, nearest rank.
double Percentile(const std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

std::unique_ptr<httplib::Client> MakeClient(const ServeBenchOptions& opts) {
  std::string base = opts.url;  // httplib takes scheme://host:port, without a path
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  auto cli = std::make_unique<httplib::Client>(base);
  cli->set_connection_timeout(10, 0);
  cli->set_read_timeout(opts.timeout_s, 0);
  cli->set_write_timeout(opts.timeout_s, 0);
  cli->set_keep_alive(true);
  // httplib writes a request's head and body separately; with Nagle's algorithm on, the body
  // then waits for the server's delayed ACK (~40 ms on Linux) on every keep-alive request, which
  // the benchmark would report as server latency. curl and most clients set TCP_NODELAY too.
  cli->set_tcp_nodelay(true);
  return cli;
}

}  // namespace

int RunServeBench(const ServeBenchOptions& opts) {
  if (opts.concurrency < 1 || opts.requests < 1 || opts.max_tokens < 1 || opts.timeout_s < 1) {
    std::fprintf(stderr, "vlmd-bench: error: --concurrency, --requests, --max-tokens, --timeout must be >= 1\n");
    return 2;
  }
  auto image = ReadFile(opts.image_path);
  if (!image.ok()) {
    std::fprintf(stderr, "vlmd-bench: error: %s\n", image.status().ToString().c_str());
    return 2;
  }
  std::vector<std::string> images;
  if (opts.distinct_images) {
    auto distinct = DistinctImages(*image, opts.requests);
    if (!distinct.ok()) {
      std::fprintf(stderr, "vlmd-bench: error: %s: %s\n", opts.image_path.c_str(),
                   distinct.status().ToString().c_str());
      return 2;
    }
    images = std::move(*distinct);
  } else {
    images.push_back(std::move(*image));
  }
  const std::string request_json = nlohmann::json{{"prompt", opts.prompt},
                                                  {"max_tokens", opts.max_tokens},
                                                  {"temperature", 0},
                                                  {"seed", 0}}
                                       .dump();
  const httplib::Headers headers = AuthHeaders(opts.api_key);

  {  // Reachability first, so a wrong URL is one clear error rather than N request errors.
    auto probe = MakeClient(opts);
    auto res = probe->Get("/health", headers);
    if (!res) {
      std::fprintf(stderr, "vlmd-bench: error: cannot reach %s: %s\n", opts.url.c_str(),
                   httplib::to_string(res.error()).c_str());
      return 1;
    }
  }

  // One run of opts.requests requests from opts.concurrency threads.
  auto measure = [&] {
    Run run;
    std::vector<Sample> samples(static_cast<size_t>(opts.requests));
    std::atomic<int> next{0};
    std::mutex err_mu;
    auto worker = [&] {
      auto cli = MakeClient(opts);
      for (int i = next.fetch_add(1); i < opts.requests; i = next.fetch_add(1)) {
        const std::string& img = images[opts.distinct_images ? static_cast<size_t>(i) : 0];
        httplib::MultipartFormDataItems items = {
            {"image", img, "image.png", "application/octet-stream"},
            {"request", request_json, "", "application/json"}};
        const auto t0 = Clock::now();
        auto res = cli->Post("/v1/vlm/invoke", headers, items);
        Sample& s = samples[static_cast<size_t>(i)];
        s.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        std::string error;
        if (!res) {
          error = "transport: " + httplib::to_string(res.error());
        } else if (res->status != 200) {
          error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300);
        } else {
          const auto body = nlohmann::json::parse(res->body, nullptr, false);
          if (!body.is_object() || !body.contains("text")) error = "reply without \"text\": " + res->body.substr(0, 300);
        }
        s.ok = error.empty();
        if (!s.ok) {
          std::lock_guard<std::mutex> lock(err_mu);
          if (run.first_error.empty()) run.first_error = error;
        }
      }
    };
    const auto wall0 = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < opts.concurrency; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    run.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
    for (const Sample& s : samples) {
      if (s.ok) run.ok_ms.push_back(s.ms);
    }
    std::sort(run.ok_ms.begin(), run.ok_ms.end());
    run.errors = opts.requests - static_cast<int>(run.ok_ms.size());
    run.throughput = run.wall_s > 0 ? static_cast<double>(run.ok_ms.size()) / run.wall_s : 0;
    return run;
  };

  const bool hostile = opts.slow_clients > 0 || opts.idle_clients > 0;
  std::vector<std::pair<std::string, Run>> runs;
  runs.emplace_back(hostile ? "unloaded" : "", measure());
  std::optional<HostileLoad> load;
  if (hostile) {
    HostileLoadOptions lo;
    lo.slow = opts.slow_clients;
    lo.idle = opts.idle_clients;
    if (!LoopbackEndpoint(opts.url, &lo.host, &lo.port)) {
      std::fprintf(stderr, "vlmd-bench: error: --slow-clients/--idle-clients need --url http://127.x.y.z:PORT\n");
      return 2;
    }
    load.emplace(lo);
    load->Start();
    if (!load->WaitOpen(std::chrono::seconds(60))) {
      std::fprintf(stderr, "vlmd-bench: error: could not open %d connections in 60 s\n", lo.slow + lo.idle);
      return 1;
    }
    // Past the first head deadlines and idle reaps, so that reconnect churn is part of the load.
    std::this_thread::sleep_for(std::chrono::seconds(opts.hostile_warmup_s));
    const int open_before = load->open();
    runs.emplace_back(std::to_string(opts.slow_clients) + " slow + " + std::to_string(opts.idle_clients) +
                          " idle (" + std::to_string(open_before) + " open)",
                      measure());
  }

  std::optional<double> peak_rss;
  {
    auto cli = MakeClient(opts);
    if (auto res = cli->Get("/metrics", headers); res && res->status == 200) {
      peak_rss = ScrapeGauge(res->body, "vlm_process_peak_rss_bytes");
    }
  }

  const std::string platform = CpuModel();
  auto pct = [](const Run& r, double p) { return r.ok_ms.empty() ? -1.0 : Percentile(r.ok_ms, p); };
  if (opts.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [label, run] : runs) {
      nlohmann::json j = {{"platform", platform},
                          {"url", opts.url},
                          {"load", label},
                          {"concurrency", opts.concurrency},
                          {"requests", opts.requests},
                          {"ok", run.ok_ms.size()},
                          {"errors", run.errors},
                          {"distinct_images", opts.distinct_images},
                          {"max_tokens", opts.max_tokens},
                          {"wall_s", run.wall_s},
                          {"throughput_images_s", run.throughput},
                          {"latency_p50_ms", run.ok_ms.empty() ? nlohmann::json(nullptr) : nlohmann::json(pct(run, 50))},
                          {"latency_p99_ms", run.ok_ms.empty() ? nlohmann::json(nullptr) : nlohmann::json(pct(run, 99))},
                          {"server_peak_rss_gb", peak_rss ? nlohmann::json(*peak_rss / 1e9) : nlohmann::json(nullptr)}};
      if (!run.first_error.empty()) j["first_error"] = run.first_error;
      out.push_back(j);
    }
    if (load) {
      out.back()["hostile_reopened"] = load->reopened();
      out.back()["hostile_connect_failures"] = load->failures();
    }
    std::cout << (runs.size() == 1 ? out[0] : out).dump(2) << "\n";
  } else {
    char mem[32] = "n/a";
    if (peak_rss) std::snprintf(mem, sizeof(mem), "%.2f", *peak_rss / 1e9);
    std::printf("%-40s | %-32s | %11s | %8s | %13s | %9s | %9s | %12s | %6s\n", "platform", "load", "concurrency",
                "requests", "images/s", "P50 ms", "P99 ms", "peak mem GB", "errors");
    for (const auto& [label, run] : runs) {
      char p50[32] = "n/a", p99[32] = "n/a";
      if (!run.ok_ms.empty()) {
        std::snprintf(p50, sizeof(p50), "%.1f", pct(run, 50));
        std::snprintf(p99, sizeof(p99), "%.1f", pct(run, 99));
      }
      std::printf("%-40.40s | %-32s | %11d | %8d | %13.2f | %9s | %9s | %12s | %6d\n", platform.c_str(),
                  label.c_str(), opts.concurrency, opts.requests, run.throughput, p50, p99, mem, run.errors);
      if (!run.first_error.empty()) std::printf("first error: %s\n", run.first_error.c_str());
    }
    if (load && !runs[0].second.ok_ms.empty() && !runs[1].second.ok_ms.empty()) {
      std::printf("loaded / unloaded: P50 %.2fx, P99 %.2fx (hostile connections reopened after the server "
                  "closed them: %llu, failed connects: %llu)\n",
                  pct(runs[1].second, 50) / pct(runs[0].second, 50), pct(runs[1].second, 99) / pct(runs[0].second, 99),
                  static_cast<unsigned long long>(load->reopened()), static_cast<unsigned long long>(load->failures()));
    }
  }
  // A run in which no request succeeded measured nothing: a failure (the table says why).
  for (const auto& [label, run] : runs) {
    if (run.ok_ms.empty()) return 1;
  }
  return 0;
}

}  // namespace vlmd::bench
