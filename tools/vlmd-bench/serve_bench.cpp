// `vlmd-bench serve` (see serve_bench.h). Latency is measured per request around the HTTP call
// alone (connect + upload + generation + reply); throughput is successful requests over the wall
// time from the first request sent to the last reply. The server's peak memory is its
// process-lifetime peak RSS (VmHWM), so it includes model loading and earlier runs.
#include "serve_bench.h"

#include <png.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/status.h"
#include "engine/image/image.h"

namespace vlmd::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  double ms = 0;
  bool ok = false;
};

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
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
  auto cli = std::make_unique<httplib::Client>(opts.url);
  cli->set_connection_timeout(10, 0);
  cli->set_read_timeout(opts.timeout_s, 0);
  cli->set_write_timeout(opts.timeout_s, 0);
  cli->set_keep_alive(true);
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

  std::vector<Sample> samples(static_cast<size_t>(opts.requests));
  std::atomic<int> next{0};
  std::mutex err_mu;
  std::string first_error;
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
        if (first_error.empty()) first_error = error;
      }
    }
  };
  const auto wall0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < opts.concurrency; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();

  std::vector<double> ok_ms;
  for (const Sample& s : samples) {
    if (s.ok) ok_ms.push_back(s.ms);
  }
  std::sort(ok_ms.begin(), ok_ms.end());
  const int errors = opts.requests - static_cast<int>(ok_ms.size());
  const double throughput = wall_s > 0 ? static_cast<double>(ok_ms.size()) / wall_s : 0;

  std::optional<double> peak_rss;
  {
    auto cli = MakeClient(opts);
    if (auto res = cli->Get("/metrics", headers); res && res->status == 200) {
      peak_rss = ScrapeGauge(res->body, "vlm_process_peak_rss_bytes");
    }
  }

  const std::string platform = CpuModel();
  if (opts.json) {
    nlohmann::json j = {{"platform", platform},
                        {"url", opts.url},
                        {"concurrency", opts.concurrency},
                        {"requests", opts.requests},
                        {"ok", ok_ms.size()},
                        {"errors", errors},
                        {"distinct_images", opts.distinct_images},
                        {"max_tokens", opts.max_tokens},
                        {"wall_s", wall_s},
                        {"throughput_images_s", throughput},
                        {"latency_p50_ms", ok_ms.empty() ? nlohmann::json(nullptr) : nlohmann::json(Percentile(ok_ms, 50))},
                        {"latency_p99_ms", ok_ms.empty() ? nlohmann::json(nullptr) : nlohmann::json(Percentile(ok_ms, 99))},
                        {"server_peak_rss_gb", peak_rss ? nlohmann::json(*peak_rss / 1e9) : nlohmann::json(nullptr)}};
    if (!first_error.empty()) j["first_error"] = first_error;
    std::cout << j.dump(2) << "\n";
  } else {
    char mem[32] = "n/a", p50[32] = "n/a", p99[32] = "n/a";
    if (peak_rss) std::snprintf(mem, sizeof(mem), "%.2f", *peak_rss / 1e9);
    if (!ok_ms.empty()) {
      std::snprintf(p50, sizeof(p50), "%.1f", Percentile(ok_ms, 50));
      std::snprintf(p99, sizeof(p99), "%.1f", Percentile(ok_ms, 99));
    }
    std::printf("%-40s | %11s | %8s | %13s | %9s | %9s | %12s | %6s\n", "platform", "concurrency",
                "requests", "images/s", "P50 ms", "P99 ms", "peak mem GB", "errors");
    std::printf("%-40.40s | %11d | %8d | %13.2f | %9s | %9s | %12s | %6d\n", platform.c_str(),
                opts.concurrency, opts.requests, throughput, p50, p99, mem, errors);
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  return 0;
}

}  // namespace vlmd::bench
