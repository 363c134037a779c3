// Config file parsing (see config.h): strict JSON, every key checked, paths made absolute.
#include "serve/config/config.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "core/read_file.h"
#include "serve/api/image_inputs.h"
#include "serve/config/config_section.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;
using internal::Resolve;
using internal::Section;
namespace fs = std::filesystem;

// The largest size in MiB a setting may give (the command line's): shifted to bytes, it fits.
constexpr int64_t kMaxMiB = int64_t{1} << 30;

Status ParseServer(const Section& s, const std::string& base_dir, ServerOptions* so, ModelSpec* model_defaults) {
  VLMD_RETURN_IF_ERROR(s.CheckObject({"host", "port", "http_threads", "threads", "max_batch", "queue",
                                      "prefill_chunk", "encode_tiles", "ctx", "precision",
                                      "image_cache_mb", "token_budget", "max_images",
                                      "max_body_mb", "timeout_s", "read_timeout_s",
                                      "body_timeout_s", "keep_alive_s", "max_connections",
                                      "max_connections_per_address", "tls_cert", "tls_key",
                                      "image_url_hosts", "memory_budget_mb", "decode_budget_mb",
                                      "body_budget_mb", "max_image_mpixels", "max_redactions"}));
  VLMD_RETURN_IF_ERROR(s.Get("host", &so->host));
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("port", &so->port));
  if (so->port > 65535) return InvalidArgumentError(s.path("port") + ": must be <= 65535");
  // The command line's bounds: each handler thread is a thread (100000 of them aborted the start).
  VLMD_RETURN_IF_ERROR(s.GetInRange("http_threads", &so->http_threads, 1, 4096));
  VLMD_RETURN_IF_ERROR(s.GetInRange("max_redactions", &so->max_concurrent_redactions, 0, 4096));
  VLMD_RETURN_IF_ERROR(s.GetInRange("threads", &model_defaults->engine.threads, 0, 4096));
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("max_batch", &model_defaults->scheduler.max_batch));
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("queue", &model_defaults->scheduler.queue_size));
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("prefill_chunk", &model_defaults->scheduler.prefill_chunk));
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("encode_tiles", &model_defaults->scheduler.encode_tiles));
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("ctx", &model_defaults->engine.n_ctx));
  if (s.has("precision")) {
    std::string name;
    VLMD_RETURN_IF_ERROR(s.Get("precision", &name));
    auto p = engine::ops::ParsePrecision(name);
    if (!p) return InvalidArgumentError(s.path("precision") + ": expected \"exact\" or \"fast\"");
    model_defaults->engine.precision = *p;
  }
  int64_t cache_mb = int64_t(model_defaults->image_cache_bytes >> 20);
  VLMD_RETURN_IF_ERROR(s.GetInRange("image_cache_mb", &cache_mb, int64_t{0}, kMaxMiB));
  model_defaults->image_cache_bytes = uint64_t(cache_mb) << 20;
  VLMD_RETURN_IF_ERROR(s.GetInRange("token_budget", &so->prepare.token_budget, int64_t{1}, int64_t{1} << 24));
  VLMD_RETURN_IF_ERROR(s.GetInRange("max_images", &so->limits.max_images, 0, 4096));
  int64_t body_mb = int64_t(so->max_body_bytes >> 20);
  VLMD_RETURN_IF_ERROR(s.GetInRange("max_body_mb", &body_mb, int64_t{1}, int64_t{1} << 20));
  so->max_body_bytes = size_t(body_mb) << 20;
  so->limits.max_image_bytes = so->max_body_bytes;
  so->prepare.decode_limits.max_bytes = so->max_body_bytes;
  int64_t body_budget_mb = int64_t(so->body_budget_bytes >> 20);
  VLMD_RETURN_IF_ERROR(s.GetInRange("body_budget_mb", &body_budget_mb, int64_t{0}, kMaxMiB));
  so->body_budget_bytes = uint64_t(body_budget_mb) << 20;
  int64_t decode_mb = int64_t(so->decode_budget_bytes >> 20);
  VLMD_RETURN_IF_ERROR(s.GetInRange("decode_budget_mb", &decode_mb, int64_t{0}, kMaxMiB));
  so->decode_budget_bytes = uint64_t(decode_mb) << 20;
  double mpixels = double(so->prepare.decode_limits.max_pixels) / 1e6;
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("max_image_mpixels", &mpixels));
  if (mpixels < 0.01 || mpixels > 1000) {
    return InvalidArgumentError(s.path("max_image_mpixels") + ": must be 0.01 to 1000");
  }
  so->prepare.decode_limits.max_pixels = uint64_t(mpixels * 1e6);
  int64_t timeout_s = std::chrono::duration_cast<std::chrono::seconds>(so->prepare.timeout).count();
  // Added to the clock for every request's deadline: a huge one wrapped into the past.
  VLMD_RETURN_IF_ERROR(s.GetInRange("timeout_s", &timeout_s, int64_t{1}, int64_t{86400} * 7));
  so->prepare.timeout = std::chrono::seconds(timeout_s);
  VLMD_RETURN_IF_ERROR(s.GetInRange("read_timeout_s", &so->read_timeout_s, 1, 3600));
  VLMD_RETURN_IF_ERROR(s.GetInRange("body_timeout_s", &so->body_timeout_s, 1, 3600));
  VLMD_RETURN_IF_ERROR(s.GetInRange("keep_alive_s", &so->keep_alive_s, 1, 3600));
  VLMD_RETURN_IF_ERROR(s.GetInRange("max_connections", &so->max_connections, 1, 1 << 20));
  VLMD_RETURN_IF_ERROR(
      s.GetInRange("max_connections_per_address", &so->max_connections_per_address, 0, 1 << 20));
  VLMD_RETURN_IF_ERROR(s.Get("tls_cert", &so->tls_cert_file));
  VLMD_RETURN_IF_ERROR(s.Get("tls_key", &so->tls_key_file));
  so->tls_cert_file = Resolve(base_dir, so->tls_cert_file);
  so->tls_key_file = Resolve(base_dir, so->tls_key_file);
  if (so->tls_cert_file.empty() != so->tls_key_file.empty()) {
    return InvalidArgumentError(s.path("tls_cert") + " and " + s.path("tls_key") + ": give both or neither");
  }
  VLMD_RETURN_IF_ERROR(s.Get("image_url_hosts", &so->limits.url_host_allowlist));
  int64_t budget_mb = int64_t(so->memory_budget_bytes >> 20);
  VLMD_RETURN_IF_ERROR(s.GetInRange("memory_budget_mb", &budget_mb, int64_t{0}, kMaxMiB));
  so->memory_budget_bytes = uint64_t(budget_mb) << 20;
  so->limits.max_tokens_limit = model_defaults->engine.n_ctx;
  return Status::Ok();
}

Status ParseModels(const json& arr, const std::string& base_dir, const ModelSpec& defaults,
                   std::vector<ModelSpec>* out) {
  if (!arr.is_array()) return InvalidArgumentError("models: expected an array");
  // A server with no model would report ready and answer every request 404.
  if (arr.empty()) return InvalidArgumentError("models: expected at least one model");
  std::set<std::string> names;
  for (size_t i = 0; i < arr.size(); ++i) {
    Section s(arr[i], "models[" + std::to_string(i) + "]");
    VLMD_RETURN_IF_ERROR(s.CheckObject({"name", "version", "model", "mmproj", "key_file", "key_command", "redact"}));
    ModelSpec spec = defaults;  // engine and scheduler settings; identity and files are its own
    spec.name.clear();
    spec.version.clear();
    spec.text_path.clear();
    spec.mmproj_path.clear();
    spec.demo = false;
    VLMD_RETURN_IF_ERROR(s.Get("name", &spec.name));
    VLMD_RETURN_IF_ERROR(s.Get("version", &spec.version));
    VLMD_RETURN_IF_ERROR(s.Get("model", &spec.text_path));
    VLMD_RETURN_IF_ERROR(s.Get("mmproj", &spec.mmproj_path));
    // A sealed model's key: its own source replaces the command line's (--model-key-*).
    if (s.has("key_file") || s.has("key_command")) {
      spec.engine.model_key = {};
      VLMD_RETURN_IF_ERROR(s.Get("key_file", &spec.engine.model_key.file));
      VLMD_RETURN_IF_ERROR(s.Get("key_command", &spec.engine.model_key.command));
      if (!spec.engine.model_key.file.empty() && !spec.engine.model_key.command.empty()) {
        return InvalidArgumentError(s.path("key_file") + ": give key_file or key_command, not both");
      }
      if (!spec.engine.model_key.file.empty()) {
        spec.engine.model_key.file = Resolve(base_dir, spec.engine.model_key.file);
      }
    }
    if (spec.name.empty()) return InvalidArgumentError(s.path("name") + ": required");
    if (spec.text_path.empty()) return InvalidArgumentError(s.path("model") + ": required");
    if (!names.insert(spec.name).second) {
      return InvalidArgumentError(s.path("name") + ": duplicate model name '" + spec.name + "'");
    }
    spec.text_path = Resolve(base_dir, spec.text_path);
    spec.mmproj_path = Resolve(base_dir, spec.mmproj_path);
    if (s.has("redact")) {
      spec.redact.emplace();
      VLMD_RETURN_IF_ERROR(internal::ParseRedact(Section(s.at("redact"), s.path("redact")), base_dir, &*spec.redact));
    }
    out->push_back(std::move(spec));
  }
  return Status::Ok();
}

Status ParseRoutes(const json& arr, const std::string& base_dir, std::vector<RouteConfig>* out) {
  if (!arr.is_array()) return InvalidArgumentError("routes: expected an array");
  for (size_t i = 0; i < arr.size(); ++i) {
    Section s(arr[i], "routes[" + std::to_string(i) + "]");
    VLMD_RETURN_IF_ERROR(s.CheckObject({"name", "split", "tiers", "thresholds", "weights", "redact"}));
    RouteConfig r;
    if (s.has("redact")) {
      r.redact.emplace();
      VLMD_RETURN_IF_ERROR(internal::ParseRedact(Section(s.at("redact"), s.path("redact")), base_dir, &*r.redact));
    }
    VLMD_RETURN_IF_ERROR(s.Get("name", &r.name));
    if (r.name.empty()) return InvalidArgumentError(s.path("name") + ": required");
    if (s.has("split") == s.has("tiers")) {
      return InvalidArgumentError(s.path("name") + ": a route has exactly one of 'split' and 'tiers'");
    }
    if (s.has("split")) {
      const json& split = s.at("split");
      if (!split.is_array() || split.empty()) {
        return InvalidArgumentError(s.path("split") + ": expected a non-empty array");
      }
      for (size_t k = 0; k < split.size(); ++k) {
        Section t(split[k], s.path("split") + "[" + std::to_string(k) + "]");
        VLMD_RETURN_IF_ERROR(t.CheckObject({"model", "weight"}));
        RouteTarget target;
        VLMD_RETURN_IF_ERROR(t.Get("model", &target.model));
        // Required: a target without one would take no traffic (a canary silently off).
        if (!t.has("weight")) return InvalidArgumentError(t.path("weight") + ": required (0 turns the target off)");
        VLMD_RETURN_IF_ERROR(t.GetNonNegative("weight", &target.weight));
        if (target.model.empty()) return InvalidArgumentError(t.path("model") + ": required");
        r.split.push_back(std::move(target));
      }
      double total = 0;
      for (const RouteTarget& t : r.split) total += t.weight;
      if (!(total > 0) || !std::isfinite(total)) {
        return InvalidArgumentError(s.path("split") + ": the weights must sum to a finite number > 0");
      }
    } else {
      Section t(s.at("tiers"), s.path("tiers"));
      VLMD_RETURN_IF_ERROR(t.CheckObject({"light", "balanced", "robust"}));
      const char* names[3] = {"light", "balanced", "robust"};
      for (int k = 0; k < 3; ++k) {
        VLMD_RETURN_IF_ERROR(t.Get(names[k], &r.tiers[k]));
        if (r.tiers[k].empty()) return InvalidArgumentError(t.path(names[k]) + ": required");
      }
      if (s.has("thresholds")) {
        const json& th = s.at("thresholds");
        if (!th.is_array() || th.size() != 2 || !th[0].is_number() || !th[1].is_number()) {
          return InvalidArgumentError(s.path("thresholds") + ": expected [light_below, robust_from]");
        }
        r.thresholds = {th[0].get<double>(), th[1].get<double>()};
        if (!(0 <= r.thresholds.light_below && r.thresholds.light_below <= r.thresholds.robust_from &&
              r.thresholds.robust_from <= 1)) {
          return InvalidArgumentError(s.path("thresholds") + ": need 0 <= light_below <= robust_from <= 1");
        }
      }
      if (s.has("weights")) {
        Section w(s.at("weights"), s.path("weights"));
        VLMD_RETURN_IF_ERROR(w.CheckObject({"image", "text"}));
        VLMD_RETURN_IF_ERROR(w.GetNonNegative("image", &r.weights.image));
        VLMD_RETURN_IF_ERROR(w.GetNonNegative("text", &r.weights.text));
        const double sum = r.weights.image + r.weights.text;
        if (!(sum > 0) || !std::isfinite(sum)) {  // an infinite sum made every score 0 or NaN
          return InvalidArgumentError(s.path("weights") + ": at least one weight must be > 0, and their sum finite");
        }
      }
    }
    out->push_back(std::move(r));
  }
  return Status::Ok();
}

Status ParseSecurity(const Section& s, const std::string& base_dir, GuardOptions* g) {
  VLMD_RETURN_IF_ERROR(s.CheckObject({"api_key", "api_keys_file", "admin_key", "admin_key_file",
                                      "image_allowlist", "word_filter"}));
  VLMD_RETURN_IF_ERROR(s.Get("api_key", &g->api_key));
  VLMD_RETURN_IF_ERROR(s.Get("api_keys_file", &g->api_keys_file));
  g->api_keys_file = Resolve(base_dir, g->api_keys_file);
  VLMD_RETURN_IF_ERROR(s.Get("admin_key", &g->admin_key));
  std::string admin_key_file;
  VLMD_RETURN_IF_ERROR(s.Get("admin_key_file", &admin_key_file));
  if (!admin_key_file.empty()) {
    // A key file holds one line; 64 KiB bounds a path that never ends (/dev/zero).
    auto text = ReadWholeFile(Resolve(base_dir, admin_key_file), uint64_t{64} << 10);
    if (!text.ok()) return Status(text.status().code(), s.path("admin_key_file") + ": " + text.status().message());
    g->admin_key = text->substr(0, text->find('\n'));
    while (!g->admin_key.empty() && std::isspace(static_cast<unsigned char>(g->admin_key.back()))) {
      g->admin_key.pop_back();
    }
    if (g->admin_key.empty()) {  // it would have turned the admin routes off
      return InvalidArgumentError(s.path("admin_key_file") + ": " + admin_key_file + " has no key on its first line");
    }
  }
  if (!g->admin_key.empty() && g->admin_key.size() < 16) {
    return InvalidArgumentError(s.path("admin_key") + ": use at least 16 characters");
  }
  if (s.has("image_allowlist")) {
    Section a(s.at("image_allowlist"), s.path("image_allowlist"));
    VLMD_RETURN_IF_ERROR(a.CheckObject({"file", "mode"}));
    VLMD_RETURN_IF_ERROR(a.Get("file", &g->image_allowlist_file));
    g->image_allowlist_file = Resolve(base_dir, g->image_allowlist_file);
    std::string mode = "enforce";
    VLMD_RETURN_IF_ERROR(a.Get("mode", &mode));
    if (mode == "enforce") {
      g->allowlist_mode = AllowlistMode::kEnforce;
    } else if (mode == "report") {
      g->allowlist_mode = AllowlistMode::kReport;
    } else if (mode == "off") {
      g->allowlist_mode = AllowlistMode::kOff;
    } else {
      return InvalidArgumentError(a.path("mode") + ": expected enforce, report or off");
    }
    if (g->allowlist_mode != AllowlistMode::kOff && g->image_allowlist_file.empty()) {
      return InvalidArgumentError(a.path("file") + ": required unless mode is off");
    }
  }
  if (s.has("word_filter")) {
    Section w(s.at("word_filter"), s.path("word_filter"));
    VLMD_RETURN_IF_ERROR(w.CheckObject({"file", "words", "action", "mask"}));
    VLMD_RETURN_IF_ERROR(w.Get("file", &g->word_filter_file));
    g->word_filter_file = Resolve(base_dir, g->word_filter_file);
    VLMD_RETURN_IF_ERROR(w.Get("words", &g->filter_words));
    std::string action = "mask";
    VLMD_RETURN_IF_ERROR(w.Get("action", &action));
    auto parsed = policy::ParseFilterAction(action);
    if (!parsed.ok()) return InvalidArgumentError(w.path("action") + ": expected mask or block");
    g->filter_action = *parsed;
    VLMD_RETURN_IF_ERROR(w.Get("mask", &g->filter_mask));
  }
  return Status::Ok();
}

Status ParseAudit(const Section& s, const std::string& base_dir, GuardOptions* g) {
  VLMD_RETURN_IF_ERROR(
      s.CheckObject({"path", "max_mb", "keep", "fsync", "log_prompts", "refusal_interval_s"}));
  // Present but without a path would mean no audit log at all.
  if (!s.has("path")) return InvalidArgumentError(s.path("path") + ": required");
  VLMD_RETURN_IF_ERROR(s.Get("path", &g->audit_path));
  if (g->audit_path.empty()) return InvalidArgumentError(s.path("path") + ": required");
  g->audit_path = Resolve(base_dir, g->audit_path);
  int64_t max_mb = int64_t(g->audit_max_bytes >> 20);
  VLMD_RETURN_IF_ERROR(s.GetInRange("max_mb", &max_mb, int64_t{1}, kMaxMiB));
  g->audit_max_bytes = uint64_t(max_mb) << 20;
  // Rotation renames keep - 1 files while audited requests wait: 20 million took minutes.
  VLMD_RETURN_IF_ERROR(s.GetInRange("keep", &g->audit_keep_files, 0, 1000));
  VLMD_RETURN_IF_ERROR(s.Get("fsync", &g->audit_fsync));
  VLMD_RETURN_IF_ERROR(s.Get("log_prompts", &g->audit_prompts));
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("refusal_interval_s", &g->audit_refusal_interval_s));
  return Status::Ok();
}

// Every route target and the default must name something that exists.
Status CheckReferences(const VlmdConfig& c) {
  std::set<std::string> models, routes;
  for (const ModelSpec& m : c.models) models.insert(m.name);
  for (const RouteConfig& r : c.routes) {
    if (models.count(r.name) || !routes.insert(r.name).second) {
      return InvalidArgumentError("routes: name '" + r.name + "' is already a model or route");
    }
    std::vector<std::string> targets;
    for (const RouteTarget& t : r.split) targets.push_back(t.model);
    if (!r.is_split()) targets.assign(r.tiers.begin(), r.tiers.end());
    for (const std::string& t : targets) {
      if (!models.count(t)) {
        return InvalidArgumentError("routes: '" + r.name + "' names unknown model '" + t + "'");
      }
    }
  }
  if (!c.default_model.empty() && !models.count(c.default_model) && !routes.count(c.default_model)) {
    return InvalidArgumentError("default_model: '" + c.default_model + "' is neither a model nor a route");
  }
  return Status::Ok();
}

}  // namespace

Result<VlmdConfig> ParseConfig(std::string_view doc, const std::string& base_dir,
                               VlmdConfig defaults) {
  // A key given twice in one object is an error: the last one won, so a second "security": {}
  // silently switched the first one's guard rails off.
  std::vector<std::set<std::string>> keys;  // per open object
  std::string duplicate;
  const json j = json::parse(
      doc,
      [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) {
          keys.emplace_back();
        } else if (event == json::parse_event_t::object_end) {
          if (!keys.empty()) keys.pop_back();
        } else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
                   !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        return true;
      },
      /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("config: not valid JSON");
  if (!duplicate.empty()) {
    return InvalidArgumentError("config: key \"" + duplicate + "\" is given twice in one object");
  }
  VlmdConfig c = std::move(defaults);
  Section top(j, "config");
  VLMD_RETURN_IF_ERROR(top.CheckObject({"server", "models", "routes", "default_model", "security",
                                        "audit", "trust", "tracing", "streams", "drift", "policies"}));
  ModelSpec model_defaults = c.models.empty() ? ModelSpec{} : c.models.front();
  if (top.has("server")) {
    VLMD_RETURN_IF_ERROR(ParseServer(Section(top.at("server"), "server"), base_dir, &c.server, &model_defaults));
  }
  if (top.has("models")) {
    c.models.clear();
    VLMD_RETURN_IF_ERROR(ParseModels(top.at("models"), base_dir, model_defaults, &c.models));
  } else {
    for (ModelSpec& m : c.models) {  // command-line models take the [server] engine settings
      m.engine = model_defaults.engine;
      m.scheduler = model_defaults.scheduler;
      m.image_cache_bytes = model_defaults.image_cache_bytes;
    }
  }
  // Models named only by their file (command line without --name) get the name the server uses.
  for (ModelSpec& m : c.models) {
    if (m.name.empty() && !m.text_path.empty()) m.name = fs::path(m.text_path).stem().string();
  }
  if (top.has("routes")) VLMD_RETURN_IF_ERROR(ParseRoutes(top.at("routes"), base_dir, &c.routes));
  VLMD_RETURN_IF_ERROR(top.Get("default_model", &c.default_model));
  if (top.has("security")) {
    VLMD_RETURN_IF_ERROR(ParseSecurity(Section(top.at("security"), "security"), base_dir, &c.server.guard));
  }
  if (top.has("audit")) {
    VLMD_RETURN_IF_ERROR(ParseAudit(Section(top.at("audit"), "audit"), base_dir, &c.server.guard));
  }
  if (top.has("trust")) {
    Section t(top.at("trust"), "trust");
    VLMD_RETURN_IF_ERROR(t.CheckObject({"flag_entropy_bits"}));
    VLMD_RETURN_IF_ERROR(t.Get("flag_entropy_bits", &c.server.guard.trust_flag_entropy_bits));
  }
  if (top.has("tracing")) {
    Section t(top.at("tracing"), "tracing");
    VLMD_RETURN_IF_ERROR(t.CheckObject({"otlp_endpoint", "sample_ratio"}));
    TracingOptions& tr = c.server.tracing;
    VLMD_RETURN_IF_ERROR(t.Get("otlp_endpoint", &tr.otlp_endpoint));
    if (!tr.otlp_endpoint.empty() && !api::internal::ParseHttpUrl(tr.otlp_endpoint).ok()) {
      return InvalidArgumentError(t.path("otlp_endpoint") + ": expected an http(s) URL");
    }
    VLMD_RETURN_IF_ERROR(t.Get("sample_ratio", &tr.sample_ratio));
    if (!(tr.sample_ratio >= 0.0 && tr.sample_ratio <= 1.0)) {
      return InvalidArgumentError(t.path("sample_ratio") + ": must be in [0, 1]");
    }
  }
  if (top.has("streams")) {
    Section t(top.at("streams"), "streams");
    VLMD_RETURN_IF_ERROR(t.CheckObject({"max_frames", "motion_low", "motion_high", "max_mb",
                                        "max_streams", "idle_s", "max_age_s"}));
    StreamOptions& so = c.server.streams;
    VLMD_RETURN_IF_ERROR(t.GetNonNegative("max_frames", &so.max_frames));
    if (so.max_frames < 1 || so.max_frames > 16) {
      return InvalidArgumentError(t.path("max_frames") + ": must be 1 to 16");
    }
    VLMD_RETURN_IF_ERROR(t.Get("motion_low", &so.motion_low));
    VLMD_RETURN_IF_ERROR(t.Get("motion_high", &so.motion_high));
    if (!(so.motion_low >= 0 && so.motion_low < so.motion_high && so.motion_high <= 1)) {
      return InvalidArgumentError(t.path("motion_low") + " and motion_high: need 0 <= low < high <= 1");
    }
    int64_t max_mb = int64_t(so.max_bytes >> 20);
    VLMD_RETURN_IF_ERROR(t.GetNonNegative("max_mb", &max_mb));
    if (max_mb < 1 || max_mb > (int64_t{1} << 30)) {
      return InvalidArgumentError(t.path("max_mb") + ": must be 1 to 2^30");
    }
    so.max_bytes = uint64_t(max_mb) << 20;
    VLMD_RETURN_IF_ERROR(t.GetNonNegative("max_streams", &so.max_streams));
    if (so.max_streams < 1 || so.max_streams > 1'000'000) {
      return InvalidArgumentError(t.path("max_streams") + ": must be 1 to 1000000");
    }
    int64_t idle_s = so.idle.count();
    VLMD_RETURN_IF_ERROR(t.GetNonNegative("idle_s", &idle_s));
    if (idle_s < 1 || idle_s > 7 * 24 * 3600) {
      return InvalidArgumentError(t.path("idle_s") + ": must be 1 to 604800 (a week)");
    }
    so.idle = std::chrono::seconds(idle_s);
    int64_t age_s = so.max_age.count();
    VLMD_RETURN_IF_ERROR(t.GetNonNegative("max_age_s", &age_s));
    if (age_s < 1 || age_s > 7 * 24 * 3600) {
      return InvalidArgumentError(t.path("max_age_s") + ": must be 1 to 604800 (a week)");
    }
    so.max_age = std::chrono::seconds(age_s);
  }
  if (top.has("policies")) {
    Section p(top.at("policies"), "policies");
    VLMD_RETURN_IF_ERROR(p.CheckObject({"redact"}));
    if (p.has("redact")) {
      VLMD_RETURN_IF_ERROR(internal::ParseRedact(Section(p.at("redact"), p.path("redact")), base_dir, &c.server.redact));
    }
  }
  if (top.has("drift")) {
    VLMD_RETURN_IF_ERROR(internal::ParseDrift(Section(top.at("drift"), "drift"), base_dir, &c.server.drift));
  }
  VLMD_RETURN_IF_ERROR(CheckReferences(c));
  return c;
}

Result<VlmdConfig> LoadConfigFile(const std::string& path, VlmdConfig defaults) {
  auto file = ReadWholeFile(path, uint64_t{16} << 20);  // a config is kilobytes
  if (!file.ok()) return file.status().WithContext("config file");
  const std::string base_dir = fs::absolute(fs::path(path)).parent_path().string();
  auto c = ParseConfig(*file, base_dir, std::move(defaults));
  if (!c.ok()) return Status(c.status().code(), path + ": " + c.status().message());
  return c;
}

}  // namespace vlmd::serve
