// Server: construction, start/stop, the plain routes, models and hot swap (see server.h).
// Generation endpoints: server_generate.cpp; admin endpoints: server_admin.cpp.
#include "serve/http/server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "engine/image/decode_budget.h"
#include "serve/api/errors.h"
#include "serve/http/guard.h"
#include "serve/http/responses.h"
#include "serve/http/server_handlers.h"

namespace vlmd::serve {
namespace {
using nlohmann::json;
}  // namespace

void SendError(HttpResponse& res, const api::ApiError& e) {
  res.status = e.http_status;
  res.set_content(api::ErrorBody(e), "application/json");
}

std::string LogSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// The route label of a request refused before routing, bounded: a path of the client's choosing
// would make one metric series per path.
std::string RefusedRouteLabel(const std::string& path) {
  for (const char* known : {"/v1/vlm/invoke", "/v1/chat/completions", "/v1/models"}) {
    if (path == known) return path;
  }
  return path.rfind("/admin/", 0) == 0 ? "/admin/*" : "other";
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Server::Handlers::Observe(const Call& call, int status) {
  const std::string code = std::to_string(status);
  s_.metrics_->requests.With({call.route, code}).Inc();
  s_.metrics_->request_duration.With({call.route, code}).Observe(SecondsSince(call.t0));
  ExportSpans(call, status);
}

// Admin request bodies are small JSON objects.
void Server::Handlers::Register() {
  Get("/health", [](HttpRequest&, HttpResponse& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  Get("/ready", [this](HttpRequest&, HttpResponse& res) {
    if (s_.draining_.load()) {
      SendError(res, {503, "server_error", "shutting_down", "the server is shutting down"});
      return;
    }
    if (!s_.ready_.load()) {
      SendError(res, {503, "server_error", "not_ready", "the model is still loading"});
      return;
    }
    // No model names here: /ready is unauthenticated, /v1/models is not.
    res.set_content(R"({"status":"ready"})", "application/json");
  });
  Get("/metrics", [this](HttpRequest&, HttpResponse& res) {
    s_.metrics_->UpdateProcessMemory();
    s_.UpdateMemoryPlanGauge();  // replaced versions drop out once their requests are done
    s_.streams_->ExpireIdle();  // an idle server's forgotten streams leave the gauges too
    s_.metrics_->streams.With().Set(static_cast<double>(s_.streams_->streams()));
    s_.metrics_->stream_bytes.With().Set(static_cast<double>(s_.streams_->bytes()));
    s_.metrics_->http_queued.With().Set(static_cast<double>(s_.queued_requests()));
    if (s_.drift_) s_.drift_->Refresh();  // replies older than a window slide out
    res.set_content(s_.registry_->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  Get("/v1/models", [this](HttpRequest& req, HttpResponse& res) {
    // Audited and counted like every request to the API (Admit took the key's rate token).
    const auto t0 = Clock::now();
    auto count = [&](int status) {
      s_.metrics_->requests.With({"/v1/models", std::to_string(status)}).Inc();
      s_.metrics_->request_duration.With({"/v1/models", std::to_string(status)}).Observe(SecondsSince(t0));
    };
    const std::string id = NextId();
    res.set_header("X-Request-Id", id);
    if (!s_.guard_->Audit({{"request_id", id}, {"key_id", req.key_id}, {"route", "/v1/models"},
                           {"remote_addr", req.remote_addr}, {"status", 200}}).ok()) {
      SendError(res, {500, "server_error", "audit_unavailable", "the audit log cannot be written"});
      count(500);
      return;
    }
    json data = json::array();
    for (const auto& m : s_.router_.Models()) {
      json entry{{"id", m->spec().name},   {"object", "model"},
                 {"created", 0},           {"owned_by", "vlmd"},
                 {"model_hash", m->hash()}, {"version", m->spec().version},
                 {"vision", m->engine().vision() != nullptr}, {"demo", m->spec().demo}};
      if (m->spec().demo) {
        entry["description"] = "demo model with RANDOM weights: its answers are gibberish";
      }
      data.push_back(entry);
    }
    for (const RouteConfig& r : s_.router_.Routes()) {
      json targets = json::array();
      if (r.is_split()) {
        for (const RouteTarget& t : r.split) targets.push_back({{"model", t.model}, {"weight", t.weight}});
      } else {
        targets = {{"light", r.tiers[0]}, {"balanced", r.tiers[1]}, {"robust", r.tiers[2]}};
      }
      data.push_back({{"id", r.name}, {"object", "model"}, {"created", 0}, {"owned_by", "vlmd"},
                      {"route", r.is_split() ? "split" : "tiers"}, {"targets", targets}});
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    count(200);
  });
  // The generation endpoints take bodies up to --max-body-mb (the front stops reading past it).
  // (Plain locals, not structured bindings: clang 14, the sanitizer builds', cannot capture those.)
  for (const std::pair<const char*, Kind>& endpoint :
       {std::pair{"/v1/vlm/invoke", Kind::kInvoke}, std::pair{"/v1/chat/completions", Kind::kChat}}) {
    const Kind kind = endpoint.second;
    Post(endpoint.first, s_.options_.max_body_bytes,
         [this, kind](HttpRequest& req, HttpResponse& res) { Generate(kind, req, res); });
  }
}

const Server::Handlers::Route* Server::Handlers::FindRoute(const std::string& method,
                                                           const std::string& path,
                                                           std::vector<std::string>* matches,
                                                           int* status) const {
  // libstdc++'s std::regex recurses once per character of a `([^/]+)` group: a 30000-byte
  // admin path overflowed the handler thread's stack (the whole server died). Every route is
  // far shorter than this.
  constexpr size_t kMaxRoutedPath = 2048;
  if (path.size() > kMaxRoutedPath) {
    *status = 414;
    return nullptr;
  }
  *status = 404;
  for (const Route& r : routes_) {
    std::smatch m;
    if (!std::regex_match(path, m, r.pattern)) continue;
    if (r.method != method && !(method == "HEAD" && r.method == "GET")) {  // HEAD: GET without the body
      *status = 405;
      continue;
    }
    matches->assign(m.begin() + 1, m.end());
    return &r;
  }
  return nullptr;
}

std::string Server::Handlers::AllowedMethods(const std::string& path) const {
  std::string allow;
  for (const Route& r : routes_) {
    if (!std::regex_match(path, r.pattern) || allow.find(r.method) != std::string::npos) continue;
    allow += (allow.empty() ? "" : ", ") + r.method;
    if (r.method == "GET") allow += ", HEAD";
  }
  return allow;
}

// Authentication before the body is read, so that clients without a valid key cannot make the
// server buffer bodies: /admin/* needs the admin key, /v1/* a client key. /v1/models takes its
// rate token here; the generation endpoints take theirs in Generate, which needs the client's
// identity for routing and the audit log anyway.
bool Server::Handlers::Admit(HttpRequest& req, HttpResponse& res) {
  const std::string auth(req.header("Authorization"));
  auto refuse = [&](const api::ApiError& e, const std::string& key_id = "") {
    const std::string id = NextId();
    res.set_header("X-Request-Id", id);
    SendError(res, e);
    s_.metrics_->requests.With({RefusedRouteLabel(req.path), std::to_string(e.http_status)}).Inc();
    (void)s_.guard_->AuditRefusal({{"request_id", id}, {"key_id", key_id}, {"route", req.path},
                                   {"remote_addr", req.remote_addr}, {"status", e.http_status},
                                   {"error", e.code}},
                                  req.remote_addr);
    return false;
  };
  if (req.path.rfind("/admin/", 0) == 0) {
    if (!s_.guard_->admin_enabled()) return true;  // not registered: 404
    if (s_.guard_->AdminAuthorized(auth)) return true;
    return refuse({401, "invalid_request_error", "invalid_admin_key",
                   "missing or wrong admin key (send Authorization: Bearer <admin key>)"});
  }
  if (req.path.rfind("/v1/", 0) != 0) return true;
  const api::ApiError no_key{401, "invalid_request_error", "invalid_api_key",
                             "missing or wrong API key (send Authorization: Bearer <key>)"};
  if (req.path != "/v1/models") {
    if (s_.guard_->KnownClient(auth)) return true;
    // Counted and audited like every refusal; Generate never sees it.
    (void)s_.guard_->Admit(auth, nullptr);
    return refuse(no_key);
  }
  double retry_after_s = 0;
  std::string limited_key;
  auto client = s_.guard_->Admit(auth, &retry_after_s, &limited_key);
  if (client.ok()) {
    req.key_id = client->key_id;
    return true;
  }
  if (client.status().code() == StatusCode::kResourceExhausted) {  // the line names the key
    res.set_header("Retry-After", RetryAfterHeader(retry_after_s));
    return refuse({429, "rate_limit_error", "rate_limited", client.status().message()}, limited_key);
  }
  return refuse(no_key);
}

bool Server::Handlers::OnHead(HttpRequest& head, HttpResponse& res, size_t* body_limit) {
  if (!Admit(head, res)) return false;
  int status = 404;
  const Route* route = FindRoute(head.method, head.path, &head.matches, &status);
  if (route == nullptr) {
    api::ApiError e{status, "invalid_request_error", "not_found", "no route " + head.method + " " + head.path};
    if (status == 414) {
      e.code = "uri_too_long";
      e.message = "the path is longer than any route (" + std::to_string(head.path.size()) + " bytes)";
    }
    if (status == 405) {
      e.code = "method_not_allowed";
      e.message = "method " + head.method + " not allowed on " + head.path;
      res.set_header("Allow", AllowedMethods(head.path));  // RFC 9110: a 405 names them
    }
    SendError(res, e);
    s_.metrics_->requests.With({RefusedRouteLabel(head.path), std::to_string(status)}).Inc();
    // An authenticated request to the API that names no route gets its line too (sampled per
    // address as the other refusals before routing: a key holder's flood of them cannot rotate
    // the trail away).
    if (head.path.rfind("/v1/", 0) == 0 || head.path.rfind("/admin/", 0) == 0) {
      const std::string id = NextId();
      res.set_header("X-Request-Id", id);
      (void)s_.guard_->AuditRefusal({{"request_id", id}, {"key_id", ""}, {"route", head.path},
                                     {"remote_addr", head.remote_addr}, {"status", status},
                                     {"error", e.code}},
                                    head.remote_addr);
    }
    return false;
  }
  *body_limit = route->body_limit;
  head.route = static_cast<int32_t>(route - routes_.data());
  return true;
}

// The route OnHead found (routes are all registered before the front starts). An exception
// becomes a 500 in the front (HttpFront catches it around this call).
void Server::Handlers::OnRequest(HttpRequest& req, HttpResponse& res) {
  routes_[static_cast<size_t>(req.route)].handle(req, res);
}

HttpResponse Server::Handlers::FrontRefusal(const HttpRequest* head, int status, std::string_view code,
                                            std::string_view message) {
  HttpResponse res;
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  SendError(res, {status, type, std::string(code), std::string(message)});
  s_.metrics_->requests.With({head ? RefusedRouteLabel(head->path) : "other", std::to_string(status)}).Inc();
  s_.metrics_->http_refusals.With({std::string(code)}).Inc();
  if (status == 503) res.set_header("Retry-After", "1");
  // A request to the API refused by the connection layer (too large, too slow, bad framing, no
  // room) is audited like the refusals at the door (sampled per address): "one line per request,
  // refused ones included".
  // (The line itself: AuditFrontRefusal, off the I/O thread.)
  if (head != nullptr && (head->path.rfind("/v1/", 0) == 0 || head->path.rfind("/admin/", 0) == 0)) {
    res.set_header("X-Request-Id", NextId());
    res.audit_refusal = true;
  }
  return res;
}

void Server::Handlers::LeaveOutFrontRefusal(const HttpRequest& head) {
  s_.guard_->LeaveOutRefusal(head.remote_addr);
}

void Server::Handlers::AuditFrontRefusal(const HttpRequest& head, const HttpResponse& res, int status,
                                         std::string_view code) {
  const std::string_view id = HeaderValue(res.headers, "X-Request-Id");
  (void)s_.guard_->AuditRefusal({{"request_id", std::string(id)}, {"key_id", ""}, {"route", head.path},
                                 {"remote_addr", head.remote_addr}, {"status", status},
                                 {"error", std::string(code)}},
                                head.remote_addr);
}

void Server::Handlers::OnDropped(std::string_view reason) {
  s_.metrics_->http_dropped.With({std::string(reason)}).Inc();
}

void Server::Handlers::OnTlsReload(bool ok) {
  s_.metrics_->http_tls_reloads.With({ok ? "ok" : "failed"}).Inc();
}

FrontHandler::Lane Server::Handlers::LaneOf(const HttpRequest& head) const {
  if (head.method != "GET" && head.method != "HEAD") return Lane::kRequests;
  if (head.path == "/health" || head.path == "/ready") return Lane::kHealth;
  return head.path == "/metrics" ? Lane::kMetrics : Lane::kRequests;
}

void Server::Handlers::OnConnections(size_t open) {
  s_.metrics_->http_connections.With().Set(static_cast<double>(open));
}

std::string RandomInstanceId() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(rd()));
  return buf;
}

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      registry_(std::make_unique<obs::Registry>()),
      metrics_(std::make_unique<ServerMetrics>(registry_.get())),
      streams_(std::make_unique<StreamWindows>(options_.streams)),
      handlers_(std::make_unique<Handlers>(this)),
      redaction_slots_(options_.max_concurrent_redactions > 0
                      ? options_.max_concurrent_redactions
                      : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {
  metrics_->memory_budget_bytes.With().Set(static_cast<double>(options_.memory_budget_bytes));
  if (options_.decode_budget_bytes > 0) {  // shared by every request's image decodes
    options_.prepare.decode_limits.budget = std::make_shared<engine::image::DecodeBudget>(
        options_.decode_budget_bytes, options_.decode_wait);
  }
  handlers_->Register();
}

Server::~Server() { Stop(); }

Status Server::Start() {
  VLMD_ASSIGN_OR_RETURN(guard_, Guard::Create(options_.guard, metrics_.get()));
  const TracingOptions& tracing = options_.tracing;
  if (!(tracing.sample_ratio >= 0.0 && tracing.sample_ratio <= 1.0)) {
    return InvalidArgumentError("trace sample ratio must be in [0, 1]");
  }
  if (!tracing.otlp_endpoint.empty()) {
    SpanExporterOptions eo;
    eo.endpoint = tracing.otlp_endpoint;
    eo.service_version = VLMD_VERSION_STRING;
    VLMD_ASSIGN_OR_RETURN(exporter_, SpanExporter::Create(std::move(eo), &metrics_->trace_spans));
    spdlog::info("tracing: spans go to {} (sample ratio {})", tracing.otlp_endpoint, tracing.sample_ratio);
  }
  if (options_.drift.enabled) {
    VLMD_ASSIGN_OR_RETURN(drift_, DriftMonitor::Create(options_.drift, metrics_.get()));
    spdlog::info("drift alarms: PSI > {} over {} window(s), baselines of {} replies{}", options_.drift.threshold,
                 options_.drift.windows.size(), options_.drift.baseline_requests,
                 options_.drift.webhook_url.empty() ? "" : ", events to a webhook");
  }
  // Detectors load once here (dlib's HOG model takes ~0.7 s), not on the first image.
  if (options_.redact.enabled() && !RedactorFor(options_.redact)) {
    return UnavailableError("redaction: the detectors cannot load (see the log)");
  }
  for (const char* kind : {"faces", "plates"}) metrics_->redactions.With({kind});  // series from 0
  if (guard_->admin_enabled()) handlers_->RegisterAdmin();
  FrontOptions fo;
  fo.host = options_.host;
  fo.port = options_.port;
  fo.handler_threads = std::max(1, options_.http_threads);
  fo.max_connections = static_cast<size_t>(std::max(1, options_.max_connections));
  fo.max_connections_per_address = static_cast<size_t>(std::max(0, options_.max_connections_per_address));
  fo.max_body_bytes_in_flight = options_.body_budget_bytes;
  fo.head_timeout = std::chrono::seconds(std::max(1, options_.read_timeout_s));
  fo.body_timeout = std::chrono::seconds(std::max(1, options_.body_timeout_s));
  fo.idle_timeout = std::chrono::seconds(std::max(1, options_.keep_alive_s));
  fo.write_timeout = std::chrono::seconds(std::max(1, options_.write_timeout_s));
  fo.tls_cert_file = options_.tls_cert_file;
  fo.tls_key_file = options_.tls_key_file;
  fo.tls_reload_interval = options_.tls_reload_interval;
  front_ = std::make_unique<HttpFront>(fo, handlers_.get());
  VLMD_RETURN_IF_ERROR(front_->Start());
  port_ = front_->port();
  spdlog::info("vlmd listening on {}://{}:{}", front_->tls() ? "https" : "http", options_.host, port_);
  return Status::Ok();
}

uint64_t Server::HeldMemory() {
  uint64_t held = options_.streams.max_bytes;  // the camera-stream windows may fill their limit
  for (const auto& m : router_.Models()) held = SaturatingAdd(held, m->memory_plan().total());
  std::lock_guard<std::mutex> lock(replaced_mu_);
  for (const auto& m : replaced_) held = SaturatingAdd(held, m->memory_plan().total());
  return SaturatingAdd(held, reaping_bytes_);
}

void Server::ReapReplaced() {
  std::unique_lock<std::mutex> lock(replaced_mu_);
  while (!reaper_stop_) {
    if (replaced_.empty()) {
      replaced_cv_.wait(lock, [&] { return reaper_stop_ || !replaced_.empty(); });
      continue;
    }
    // Under the lock no copy can be made but here: a count of 1 is this list's alone.
    std::vector<std::shared_ptr<ModelHost>> done;
    uint64_t taken = 0;  // their plans, counted in reaping_bytes_ until they are gone
    std::erase_if(replaced_, [&](std::shared_ptr<ModelHost>& m) {
      if (m.use_count() != 1) return false;
      taken = SaturatingAdd(taken, m->memory_plan().total());
      done.push_back(std::move(m));
      return true;
    });
    if (!done.empty()) {
      const size_t n = done.size();
      reaping_bytes_ = SaturatingAdd(reaping_bytes_, taken);
      reaping_ += n;
      lock.unlock();
      done.clear();  // torn down here, off every request's thread and every lock
      lock.lock();
      reaping_bytes_ -= std::min(reaping_bytes_, taken);
      reaping_ -= n;
      replaced_cv_.notify_all();  // WaitForReplacedVersions
      lock.unlock();
      UpdateMemoryPlanGauge();
      lock.lock();
      continue;
    }
    replaced_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return reaper_stop_; });
  }
}

bool Server::WaitForReplacedVersions(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::unique_lock<std::mutex> lock(replaced_mu_);
  for (;;) {
    if (replaced_.empty() && reaping_ == 0) return true;
    if (draining_.load() || std::chrono::steady_clock::now() >= until) return false;
    // Woken when a version is torn down; the 20 ms bound sees draining_ and the deadline.
    replaced_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

uint64_t Server::MemoryLeftForLoad(const ModelSpec& spec) {
  const uint64_t budget = options_.memory_budget_bytes;
  if (budget == 0) return UINT64_MAX;
  const uint64_t held = SaturatingAdd(HeldMemory(), spec.image_cache_bytes);
  return held < budget ? budget - held : 0;
}

Status Server::CheckMemoryBudget(const ModelHost& candidate) {
  const uint64_t budget = options_.memory_budget_bytes;
  if (budget == 0) return Status::Ok();
  const uint64_t held = HeldMemory();
  const uint64_t needed = candidate.memory_plan().total();
  if (needed <= budget && held <= budget - needed) return Status::Ok();
  const auto mib = [](uint64_t b) { return std::to_string(CeilMiB(b)); };
  return ResourceExhaustedError(
      "model '" + candidate.spec().name + "' needs " +
      candidate.memory_plan().ToString(candidate.spec().engine.n_ctx) +
      "; the loaded models and the stream windows hold " + mib(held) + " MiB and the memory budget is " + mib(budget) +
      " MiB (lower --ctx, --max-batch or --image-cache-mb, or raise --memory-budget-mb)");
}

Status Server::AddModel(std::shared_ptr<ModelHost> model) {
  // The budget's check and the add as one step against a reload's (the admin routes are live
  // while the configured models still load): each could pass without counting the other's model.
  std::lock_guard<std::mutex> one_at_a_time(reload_mu_);
  return AddModelLocked(std::move(model));
}

Result<std::shared_ptr<ModelHost>> Server::LoadModel(const ModelSpec& spec) {
  std::lock_guard<std::mutex> one_at_a_time(reload_mu_);
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<ModelHost> loaded,
                        ModelHost::Load(spec, metrics_.get(), MemoryLeftForLoad(spec)));
  std::shared_ptr<ModelHost> model(std::move(loaded));
  VLMD_RETURN_IF_ERROR(AddModelLocked(model));
  return model;
}

Status Server::AddModelLocked(std::shared_ptr<ModelHost> model) {
  VLMD_RETURN_IF_ERROR(CheckMemoryBudget(*model));
  if (const auto& ro = model->spec().redact; ro && ro->enabled() && !RedactorFor(*ro)) {
    return UnavailableError("model '" + model->spec().name + "': redaction detectors cannot load (see the log)");
  }
  if (drift_) drift_->Track(model->spec().name, model->spec().version, model->hash());
  // Both results' series from 0, so that increase() sees the first hot swap (and a failed one).
  for (const char* result : {"ok", "failed"}) metrics_->model_reloads.With({model->spec().name, result});
  router_.Put(std::move(model));
  UpdateMemoryPlanGauge();
  return Status::Ok();
}

std::shared_ptr<const redact::Redactor> Server::RedactorFor(const redact::RedactOptions& o) {
  const std::string key = redact::RedactSettingKey(o);
  {
    std::lock_guard<std::mutex> lock(redactors_mu_);
    if (const auto it = redactors_.find(key); it != redactors_.end()) return it->second;
  }
  // Loaded without the lock (HOG takes ~0.7 s): other settings' requests go on meanwhile. Two
  // first requests of one setting may both load; the first stored wins.
  auto made = redact::Redactor::Create(o);
  if (!made.ok()) {
    spdlog::error("redaction: {}", made.status().ToString());
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(redactors_mu_);
  return redactors_.try_emplace(key, std::move(*made)).first->second;
}

Status Server::SetRoutes(std::vector<RouteConfig> routes, std::string default_name) {
  // A route's own redaction setting loads here, not at its first request.
  for (const RouteConfig& r : routes) {
    if (r.redact && r.redact->enabled() && !RedactorFor(*r.redact)) {
      return UnavailableError("route '" + r.name +
                              "': redaction detectors cannot load (see the log)");
    }
  }
  router_.SetRoutes(std::move(routes), std::move(default_name));
  return Status::Ok();
}

void Server::UpdateMemoryPlanGauge() {
  metrics_->memory_planned_bytes.With().Set(static_cast<double>(HeldMemory()));
}

namespace {

// A freshly loaded model must answer before it serves, through its own scheduler (the path
// real requests take): one greedy token from a short prompt, and with vision one from a small
// gray image too.
Status SelfCheck(ModelHost& host) {
  std::vector<JobInput> checks(1);
  checks[0].prompt = "Hello";
  if (host.engine().vision() != nullptr) {
    const std::string ppm = "P6\n32 32\n255\n" + std::string(32 * 32 * 3, char(128));
    engine::runtime::ImageTimings t;
    auto img = host.engine().PrepareImage({reinterpret_cast<const uint8_t*>(ppm.data()), ppm.size()},
                                          {}, 0, &t);
    if (!img.ok()) return Status(img.status().code(), "self-check image: " + img.status().message());
    JobInput with_image;
    with_image.prompt = std::string(api::kMediaMarker) + "Hello";
    with_image.images.push_back(std::move(*img));
    with_image.image_prepare_ms.push_back(0.0);
    checks.push_back(std::move(with_image));
  }
  for (JobInput& in : checks) {
    in.params.max_tokens = 1;
    in.deadline = Clock::now() + std::chrono::seconds(120);
    auto job = std::make_shared<Job>(std::move(in));
    VLMD_RETURN_IF_ERROR(host.scheduler().Submit(job));
    while (!job->Wait(Clock::now() + std::chrono::seconds(1), nullptr)) {
    }
    VLMD_RETURN_IF_ERROR(job->status());
    if (job->result().tokens.empty()) return InternalError("self-check generated no token");
  }
  return Status::Ok();
}

}  // namespace

void LogLoadedWeights(const ModelHost& model) {
  const engine::runtime::VlmEngine& e = model.engine();
  const engine::ops::PackingSummary text = e.model().packing();
  const engine::ops::PackingSummary vision =
      e.vision() != nullptr ? e.vision()->packing() : engine::ops::PackingSummary{};
  spdlog::info("model '{}': {} kernels, packed weights: text {}; vision {}", model.spec().name,
               e.isa_name(), text.ToString(), vision.ToString());
  if (!model.decrypted()) return;
  if (model.decrypted_locked()) {
    spdlog::info("model '{}': sealed files decrypted into locked memory, and the engine's copies of "
                 "the weights locked too (activations and the K/V cache are ordinary memory: run with "
                 "core dumps off where that matters)",
                 model.spec().name);
  } else {
    spdlog::warn("model '{}': sealed files decrypted into memory that could not be locked (raise "
                 "RLIMIT_MEMLOCK, e.g. ulimit -l, or run without swap): a swap device could receive its pages",
                 model.spec().name);
  }
}

Status Server::ReloadModel(const std::string& name, const ModelPatch* patch, std::string* previous_version,
                           std::shared_ptr<ModelHost>* loaded_out) {
  std::lock_guard<std::mutex> one_at_a_time(reload_mu_);
  // A server draining or stopping loads nothing more: a load takes seconds to minutes that the
  // shutdown would wait for, and a second copy of the model's memory.
  if (draining_.load()) return UnavailableError("the server is shutting down: no reloads");
  std::shared_ptr<ModelHost> old = router_.Get(name);
  if (!old) return NotFoundError("no model '" + name + "'");
  if (previous_version != nullptr) *previous_version = old->spec().version;
  ModelSpec next = old->spec();
  next.name = name;
  bool files_changed = false;
  if (patch != nullptr) {
    if (patch->text_path) {
      files_changed |= *patch->text_path != next.text_path;
      next.text_path = *patch->text_path;
    }
    if (patch->mmproj_path) {
      files_changed |= *patch->mmproj_path != next.mmproj_path;
      next.mmproj_path = *patch->mmproj_path;
    }
    if (patch->version) {
      next.version = *patch->version;
      next.version_from_hash = false;
    }
    if (files_changed) next.demo = false;
  }
  // A hash-derived version is derived again from the files (new files without a new label get
  // theirs); a configured or given label is kept.
  if ((patch == nullptr || !patch->version) && (files_changed || next.version_from_hash)) {
    next.version.clear();
  }
  spdlog::info("reloading model '{}' from {}", name, next.text_path);
  auto loaded = ModelHost::Load(next, metrics_.get(), MemoryLeftForLoad(next));
  Status s = loaded.ok() ? Status::Ok() : loaded.status();
  if (s.ok() && old->engine().vision() != nullptr && (*loaded)->engine().vision() == nullptr) {
    s = FailedPreconditionError("the new version has no vision encoder (mmproj); the serving one has");
  }
  if (s.ok()) s = CheckMemoryBudget(**loaded);
  if (s.ok()) s = SelfCheck(**loaded);
  if (s.ok() && draining_.load()) s = UnavailableError("the server began shutting down during the reload");
  if (!s.ok()) {
    metrics_->model_reloads.With({name, "failed"}).Inc();
    spdlog::error("reload of '{}' failed, the previous version keeps serving: {}", name, s.ToString());
    return s;
  }
  std::shared_ptr<ModelHost> fresh(std::move(*loaded));
  spdlog::info("model '{}' now serves version {} (sha256 {}); was {}", name, fresh->spec().version,
               fresh->hash(), old->spec().version);
  if (fresh->spec().version == old->spec().version && fresh->hash() != old->hash()) {
    // A configured label kept over new weights (files changed in place): replies, metrics and
    // drift name two weight sets with one label.
    spdlog::warn("model '{}': new weights (sha256 {}) under the same version label '{}' as the old ({}); "
                 "give the reload a new version to tell them apart",
                 name, fresh->hash(), fresh->spec().version, old->hash());
  }
  LogLoadedWeights(*fresh);
  {
    std::lock_guard<std::mutex> lock(replaced_mu_);
    replaced_.push_back(old);  // counted until its in-flight requests release it
    // (reaper_stop_ first: once Stop set it, it joins reaper_ outside this lock.)
    if (!reaper_stop_ && !reaper_.joinable()) reaper_ = std::thread([this] { ReapReplaced(); });
    replaced_cv_.notify_all();
  }
  if (drift_) drift_->Track(name, fresh->spec().version, fresh->hash());
  if (loaded_out != nullptr) *loaded_out = fresh;
  router_.Put(std::move(fresh));
  old.reset();
  UpdateMemoryPlanGauge();
  metrics_->model_reloads.With({name, "ok"}).Inc();
  return Status::Ok();
}

bool Server::Drain(std::chrono::milliseconds timeout) {
  draining_.store(true);
  ready_.store(false);
  const auto until = Clock::now() + timeout;
  while (in_flight_.load() > 0) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

size_t Server::queued_requests() const { return front_ ? front_->queued_requests() : 0; }

void Server::Stop() {
  if (stopped_.exchange(true)) return;
  // Requests still waiting for a handler thread are answered 503 shutting_down by their handler
  // (the front runs them at Stop), not left to a model that is going away.
  draining_.store(true);
  ready_.store(false);
  // Requests still in flight (past the drain's timeout) end now with a 503 "server shutting
  // down" (a stream with its error event): the front's Stop joins the handler threads, which
  // waited for their jobs to finish however long they ran (--drain-timeout was not kept).
  std::vector<std::shared_ptr<ModelHost>> hosts = router_.Models();
  {
    std::lock_guard<std::mutex> lock(replaced_mu_);
    for (const auto& host : replaced_) hosts.push_back(host);
  }
  for (const auto& host : hosts) host->scheduler().Shutdown();
  hosts.clear();
  if (front_) front_->Stop();
  router_.Clear();
  {
    std::lock_guard<std::mutex> lock(replaced_mu_);
    reaper_stop_ = true;
  }
  replaced_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  std::vector<std::shared_ptr<ModelHost>> left;
  {
    std::lock_guard<std::mutex> lock(replaced_mu_);
    left.swap(replaced_);
  }
  left.clear();  // the replaced versions left, torn down here
}

}  // namespace vlmd::serve
