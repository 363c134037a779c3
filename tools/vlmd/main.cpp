// vlmd: the HTTP server. Flag parsing, the demo model, signals; the work lives in src/serve.
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/synth/model_presets.h"
#include "engine/synth/synthetic_model.h"
#include "serve/config/config.h"
#include "serve/http/server.h"

namespace {

namespace fs = std::filesystem;
using namespace vlmd;

// The random-weight demo model, generated once into the cache folder (VLMD_DEMO_DIR, else
// $XDG_CACHE_HOME/vlmd/demo, else ~/.cache/vlmd/demo).
Result<std::pair<std::string, std::string>> EnsureDemoModel() {
  fs::path dir;
  if (const char* d = std::getenv("VLMD_DEMO_DIR"); d != nullptr && *d != '\0') {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    dir = fs::path(x) / "vlmd" / "demo";
  } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    dir = fs::path(h) / ".cache" / "vlmd" / "demo";
  } else {
    return FailedPreconditionError("no HOME: set VLMD_DEMO_DIR or pass -m");
  }
  const std::string text = (dir / "text.gguf").string(), mmproj = (dir / "mmproj.gguf").string();
  if (fs::exists(text) && fs::exists(mmproj)) return std::make_pair(text, mmproj);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kUnavailable, "cannot create " + dir.string() + ": " + ec.message());
  spdlog::warn("generating the demo model (RANDOM weights, not a trained model) into {}", dir.string());
  const auto preset = engine::synth::FindPreset("demo");
  if (!preset) return InternalError("demo preset missing");
  VLMD_RETURN_IF_ERROR(engine::synth::WriteSyntheticText(*preset, {}, text));
  VLMD_RETURN_IF_ERROR(engine::synth::WriteSyntheticMmproj(*preset, {}, mmproj));
  return std::make_pair(text, mmproj);
}

// Loads every configured model in order (the demo model when none is configured).
// SIGINT and SIGTERM: the signals that end the process (SIGHUP reloads).
sigset_t EndSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

Status LoadModels(serve::Server& server, std::vector<serve::ModelSpec>& models) {
  for (serve::ModelSpec& spec : models) {
    if (spec.name.empty()) spec.name = fs::path(spec.text_path).stem().string();
    spdlog::info("loading '{}': {}{}", spec.name, spec.text_path,
                 spec.mmproj_path.empty() ? "" : " + " + spec.mmproj_path);
    auto loaded = server.LoadModel(spec);
    if (!loaded.ok()) {
      return Status(loaded.status().code(), "model '" + spec.name + "': " + loaded.status().message());
    }
    const std::shared_ptr<serve::ModelHost>& model = *loaded;
    spdlog::info("model '{}' ready: version {}, sha256 {}, memory at most {}", spec.name,
                 model->spec().version, model->hash(),
                 model->memory_plan().ToString(spec.engine.n_ctx));
    serve::LogLoadedWeights(*model);
  }
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vlmd: inference server for vision-language models (GGUF text model + mmproj)."};
  serve::ServerOptions so;
  serve::ModelSpec spec;
  std::string config_path;
  int64_t image_cache_mb = 256, max_body_mb = 32;
  int timeout_s = 300, drain_s = 30;
  app.add_option("-c,--config", config_path,
                 "config file (JSON): models, routes, guard rails; see README. Flags given too "
                 "set the defaults the file overrides");
  app.add_option("-m,--model", spec.text_path, "text model GGUF (none: the random-weight demo model)");
  app.add_option("--mmproj", spec.mmproj_path, "vision encoder + projector GGUF");
  app.add_option("--model-key-file", spec.engine.model_key.file,
                 "key of sealed model files (vlmd-encrypt; 32 hex digits; else env VLMD_MODEL_KEY)");
  app.add_option("--model-key-command", spec.engine.model_key.command,
                 "command printing that key, e.g. a KMS client (run by /bin/sh with VLMD_KEY_ID set)");
  app.add_option("--name", spec.name, "served model id (default: the text file's stem)");
  app.add_option("--model-version", spec.version, "version label (default: the files' SHA-256 prefix)");
  app.add_option("--host", so.host, "address to listen on")->capture_default_str();
  app.add_option("--port", so.port, "port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("-t,--threads", spec.engine.threads, "compute threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--max-batch", spec.scheduler.max_batch, "sequences decoded together")->capture_default_str();
  app.add_option("--queue", spec.scheduler.queue_size, "requests waiting for a slot before 429")->capture_default_str();
  app.add_option("--prefill-chunk", spec.scheduler.prefill_chunk,
                 "prompt rows prefilled between two decode steps (chunked prefill)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--encode-tiles", spec.scheduler.encode_tiles,
                 "image tiles encoded between two decode steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ctx", spec.engine.n_ctx, "context positions per sequence")->capture_default_str();
  std::string precision = "fast";
  app.add_option("--precision", precision,
                 "exact: the parity reference; fast: float weights as int8 blocks too")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
  app.add_option("--api-key", so.guard.api_key, "require Authorization: Bearer KEY on /v1/* (or env VLMD_API_KEY)");
  app.add_option("--admin-key", so.guard.admin_key, "enable /admin/* with this key (or env VLMD_ADMIN_KEY)");
  app.add_option("--image-cache-mb", image_cache_mb, "visual-embedding cache size")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--otlp-endpoint", so.tracing.otlp_endpoint,
                 "send trace spans (OTLP/HTTP JSON) to this collector URL, e.g. "
                 "http://otel-collector:4318/v1/traces");
  app.add_option("--trace-sample-ratio", so.tracing.sample_ratio,
                 "share of requests without a traceparent header whose spans are sent")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  int64_t memory_budget_mb = 0;
  app.add_option("--memory-budget-mb", memory_budget_mb,
                 "refuse models whose weights + K/V at full batch and context + image cache would "
                 "exceed this in total (0: no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--token-budget", so.prepare.token_budget, "max prompt tokens (text + image)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--image-url-host", so.limits.url_host_allowlist,
                 "host that image_url http(s) URLs may name (repeat; none: URLs refused)");
  app.add_option("--max-images", so.limits.max_images, "images per request")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--max-body-mb", max_body_mb, "request body limit")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  int64_t body_budget_mb = int64_t(so.body_budget_bytes >> 20);
  app.add_option("--body-budget-mb", body_budget_mb,
                 "request body bytes held at once over all connections; a body over it gets "
                 "503 (0: no bound)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  int64_t decode_budget_mb = int64_t(so.decode_budget_bytes >> 20);
  app.add_option("--decode-budget-mb", decode_budget_mb,
                 "decoded image bytes in flight across requests; over it a request waits, then "
                 "gets 503 (0: no bound)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  double max_image_mpixels = double(so.prepare.decode_limits.max_pixels) / 1e6;
  app.add_option("--max-image-mpixels", max_image_mpixels,
                 "largest image accepted, in millions of pixels (413 beyond)")
      ->check(CLI::Range(0.01, 1000.0))
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "per-request deadline, seconds")
      ->check(CLI::Range(1, 86400 * 7))
      ->capture_default_str();
  app.add_option("--drain-timeout", drain_s, "on SIGTERM/SIGINT, seconds to let accepted requests finish")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  app.add_option("--http-threads", so.http_threads, "requests handled at once (not connections)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--max-redactions", so.max_concurrent_redactions,
                 "requests redacting their images at once; beyond, a request waits up to 5 s, "
                 "then gets 429 (0: one per core)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_option("--max-connections", so.max_connections, "connections open at once (503 beyond)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-connections-per-address", so.max_connections_per_address,
                 "connections from one client address (503 beyond; 0: no cap, e.g. behind a proxy)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--read-timeout", so.read_timeout_s, "seconds for a whole request head (408 after)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--body-timeout", so.body_timeout_s, "seconds for a whole request body (408 after)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--tls-cert", so.tls_cert_file,
                 "serve HTTPS with this PEM certificate chain (with --tls-key; reloaded when the files change)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", so.tls_key_file, "the PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--keep-alive", so.keep_alive_s, "seconds an idle connection is kept")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (so.guard.api_key.empty()) {
    if (const char* k = std::getenv("VLMD_API_KEY"); k != nullptr) so.guard.api_key = k;
  }
  if (so.guard.admin_key.empty()) {
    if (const char* k = std::getenv("VLMD_ADMIN_KEY"); k != nullptr) so.guard.admin_key = k;
  }
  if (image_cache_mb < 0 || max_body_mb < 1 || timeout_s < 1) {
    spdlog::error("--image-cache-mb must be >= 0, --max-body-mb and --timeout >= 1");
    return 2;
  }
  spec.image_cache_bytes = static_cast<uint64_t>(image_cache_mb) << 20;
  so.memory_budget_bytes = static_cast<uint64_t>(memory_budget_mb) << 20;
  spec.engine.precision =
      engine::ops::ParsePrecision(precision).value_or(engine::ops::Precision::kFast);
  so.max_body_bytes = static_cast<size_t>(max_body_mb) << 20;
  so.limits.max_image_bytes = so.max_body_bytes;
  so.prepare.decode_limits.max_bytes = so.max_body_bytes;
  so.prepare.decode_limits.max_pixels = static_cast<uint64_t>(max_image_mpixels * 1e6);
  so.decode_budget_bytes = static_cast<uint64_t>(decode_budget_mb) << 20;
  so.body_budget_bytes = static_cast<uint64_t>(body_budget_mb) << 20;
  so.prepare.timeout = std::chrono::seconds(timeout_s);
  so.limits.max_tokens_limit = spec.engine.n_ctx;

  serve::VlmdConfig config;
  config.server = so;
  config.models.push_back(spec);
  if (!config_path.empty()) {
    auto loaded = serve::LoadConfigFile(config_path, config);
    if (!loaded.ok()) {
      spdlog::error("{}", loaded.status().ToString());
      return 2;
    }
    config = std::move(*loaded);
  }
  if (config.models.size() == 1 && config.models[0].text_path.empty()) {
    auto demo = EnsureDemoModel();
    if (!demo.ok()) {
      spdlog::error("demo model: {}", demo.status().ToString());
      return 1;
    }
    serve::ModelSpec& m = config.models[0];
    m.text_path = demo->first;
    m.mmproj_path = demo->second;
    m.demo = true;
    if (m.name.empty()) m.name = "vlmd-demo";
    spdlog::warn("serving the DEMO model with random weights: answers are gibberish; pass -m/--mmproj");
  }

  // Signals are taken by a dedicated sigwait below; block them before any thread starts.
  sigset_t sigs = EndSignals();
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  serve::Server server(config.server);
  if (Status s = server.Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return s.code() == StatusCode::kUnavailable ? 1 : 2;
  }
  // A SIGINT or SIGTERM while the detectors and models load (minutes for large or sealed files;
  // a file on a stalled network volume may never finish) ends the process at once: nothing is
  // served yet, and the signal loop below starts only after the load (the signal waited, past
  // an orchestrator's grace period, for a load that might not end).
  std::atomic<bool> loading{true};
  std::thread load_watch([&loading] {
    const sigset_t stop = EndSignals();
    const timespec tick{0, 100'000'000};
    while (loading.load()) {
      if (const int sig = sigtimedwait(&stop, nullptr, &tick); sig > 0) {
        spdlog::warn("signal {} while loading: exiting", sig);
        spdlog::shutdown();
        std::_Exit(128 + sig);
      }
    }
  });
  auto load = [&]() -> int {
    // Routes first: their redaction detectors load now, before minutes of model loading (the
    // server is not ready until the models are).
    if (Status s = server.SetRoutes(config.routes, config.default_model); !s.ok()) {
      spdlog::error("{}", s.ToString());
      return 1;
    }
    if (Status s = LoadModels(server, config.models); !s.ok()) {
      spdlog::error("cannot load the model: {}", s.ToString());
      return 2;
    }
    return 0;
  };
  const int load_failed = load();
  loading.store(false);  // a signal from here on waits for the loop below (it stays pending)
  load_watch.join();
  if (load_failed != 0) return load_failed;
  server.SetReady(true);

  // SIGHUP's reloads run on their own thread, so that a SIGTERM arriving meanwhile drains at once
  // (a reload still loading is dropped when it ends: ReloadModel refuses once draining).
  std::thread reloads;
  std::atomic<bool> reloading{false};
  for (;;) {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig != SIGHUP) {
      spdlog::info("signal {}: draining ({} requests in flight, up to {} s)", sig, server.in_flight(), drain_s);
      if (!server.Drain(std::chrono::seconds(drain_s))) {
        spdlog::warn("drain timeout: {} requests still in flight are cut off", server.in_flight());
      }
      break;
    }
    if (reloading.load()) {
      spdlog::warn("SIGHUP: the reload of every model asked for earlier is still running; not started again");
      continue;
    }
    if (reloads.joinable()) reloads.join();
    // SIGHUP: hot-swap every model from its files (same paths, re-read), one at a time.
    spdlog::info("SIGHUP: reloading every model");
    reloading.store(true);
    // With a memory budget, each next model waits until the version just replaced has finished
    // its requests (at most a request's deadline): both count against the budget until then,
    // and under load the next reload failed it.
    const bool budgeted = config.server.memory_budget_bytes > 0;
    const auto release_wait = std::chrono::duration_cast<std::chrono::seconds>(config.server.prepare.timeout) +
                              std::chrono::seconds(5);  // a request's deadline (flag or config file)
    reloads = std::thread([&server, &reloading, budgeted, release_wait] {
      // By name: holding the models' list through the loop kept every replaced version alive
      // (and counted in the memory budget) until the last reload, which then failed the budget.
      std::vector<std::string> names;
      for (const auto& m : server.router().Models()) names.push_back(m->spec().name);
      for (size_t i = 0; i < names.size(); ++i) {
        if (server.draining()) break;
        if (i > 0 && budgeted && !server.WaitForReplacedVersions(release_wait) && !server.draining()) {
          spdlog::warn("SIGHUP: a replaced version still has requests after {} s; reloading '{}' anyway",
                       release_wait.count(), names[i]);
        }
        (void)server.ReloadModel(names[i]);  // a failure is logged; the old one keeps serving
      }
      reloading.store(false);
    });
  }
  // Stopped first: every request still there is answered and the port closed. A reload still
  // loading cannot be cut short; the exit waits for it (its copy is dropped: the server drains),
  // and a second SIGINT/SIGTERM ends the process at once meanwhile.
  server.Stop();
  if (reloads.joinable()) {
    if (reloading.load()) {
      spdlog::info("waiting for a SIGHUP reload still loading (a second SIGINT or SIGTERM exits now)");
    }
    // SIGINT and SIGTERM only: a SIGHUP now (whose default action ends the process) stays
    // blocked, pending until the exit.
    const sigset_t ends = EndSignals();
    pthread_sigmask(SIG_UNBLOCK, &ends, nullptr);
    reloads.join();
  }
  return 0;
}
