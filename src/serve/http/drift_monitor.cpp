// Drift alarms per model version (see drift_monitor.h).
#include "serve/http/drift_monitor.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

namespace vlmd::serve {
namespace {

using nlohmann::json;
using policy::DriftStat;
using policy::kDriftStats;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string UtcNowIso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A file-name-safe form of a model name or version label.
std::string SafeName(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ? c : '_';
  return out;
}

json ScoreJson(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

}  // namespace

struct DriftMonitor::VersionState {
  std::string model, version, hash;
  std::vector<policy::DriftSample> collecting;  // until the baseline is complete
  std::optional<policy::DriftBaseline> baseline;
  std::string baseline_source;  // first_requests | file | admin
  std::vector<policy::RollingBinCounts> windows;
  std::vector<std::array<double, kDriftStats>> scores;   // per window, NaN: not scored
  std::vector<std::array<bool, kDriftStats>> alarmed;    // per window
};

Result<std::unique_ptr<DriftMonitor>> DriftMonitor::Create(DriftOptions options, ServerMetrics* metrics,
                                                           SecondsClock clock) {
  std::unique_ptr<WebhookSender> webhook;
  if (!options.webhook_url.empty()) {
    VLMD_ASSIGN_OR_RETURN(webhook, WebhookSender::Create({.url = options.webhook_url,
                                                          .timeout_s = options.webhook_timeout_s,
                                                          .retries = options.webhook_retries},
                                                         &metrics->drift_webhooks));
  }
  if (!clock) clock = SteadySeconds;
  return std::unique_ptr<DriftMonitor>(
      new DriftMonitor(std::move(options), metrics, std::move(clock), std::move(webhook)));
}

DriftMonitor::DriftMonitor(DriftOptions options, ServerMetrics* metrics, SecondsClock clock,
                           std::unique_ptr<WebhookSender> webhook)
    : options_(std::move(options)), metrics_(metrics), clock_(std::move(clock)), webhook_(std::move(webhook)) {}

DriftMonitor::~DriftMonitor() = default;

std::string DriftMonitor::BaselinePath(const std::string& model, const std::string& version) const {
  if (options_.baseline_dir.empty()) return "";
  return (std::filesystem::path(options_.baseline_dir) / (SafeName(model) + "@" + SafeName(version) + ".json"))
      .string();
}

void DriftMonitor::Track(const std::string& model, const std::string& version, const std::string& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = models_[model];
  if (slot && slot->hash == hash && slot->version == version) return;
  if (slot) Retire(*slot);
  slot = std::make_unique<VersionState>();
  slot->model = model;
  slot->version = version;
  slot->hash = hash;
  metrics_->drift_baseline_requests.With({model, version}).Set(0);
  LoadBaselineFile(*slot);
}

void DriftMonitor::LoadBaselineFile(VersionState& v) {
  const std::string path = BaselinePath(v.model, v.version);
  if (path.empty() || !std::filesystem::exists(path)) return;
  std::ifstream in(path);
  const json j = json::parse(in, nullptr, false);
  auto parsed = policy::BaselineFromJson(j);
  if (!parsed.ok()) {
    spdlog::warn("drift: model '{}' version {}: baseline file {} is not usable ({}); the first {} replies "
                 "form the baseline",
                 v.model, v.version, path, parsed.status().message(), options_.baseline_requests);
    return;
  }
  if (!j.contains("model_hash") || j["model_hash"] != v.hash) {
    spdlog::warn("drift: model '{}' version {}: baseline file {} was taken from other model files; the "
                 "first {} replies form the baseline",
                 v.model, v.version, path, options_.baseline_requests);
    return;
  }
  spdlog::info("drift: model '{}' version {}: baseline of {} replies from {}", v.model, v.version,
               parsed->requests, path);
  StartWindows(v, std::move(*parsed), "file");
}

void DriftMonitor::StartWindows(VersionState& v, policy::DriftBaseline baseline, std::string source) {
  v.collecting.clear();
  v.collecting.shrink_to_fit();
  v.windows.clear();
  for (const DriftWindow& w : options_.windows) v.windows.emplace_back(w.seconds, baseline);
  if (!v.scores.empty()) Retire(v);  // scores of the old baseline
  v.scores.assign(options_.windows.size(), {});
  for (auto& s : v.scores) s.fill(kNaN);
  v.alarmed.assign(options_.windows.size(), {});
  metrics_->drift_baseline_requests.With({v.model, v.version}).Set(static_cast<double>(baseline.requests));
  v.baseline = std::move(baseline);
  v.baseline_source = std::move(source);
}

void DriftMonitor::Record(const std::string& model, const std::string& hash, const policy::DriftSample& sample) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = models_.find(model);
  if (it == models_.end() || it->second->hash != hash) return;
  VersionState& v = *it->second;
  if (!v.baseline) {
    v.collecting.push_back(sample);
    if (v.collecting.size() >= size_t(options_.baseline_requests)) {
      spdlog::info("drift: model '{}' version {}: baseline of its first {} replies", v.model, v.version,
                   v.collecting.size());
      StartWindows(v, policy::BuildBaseline(v.collecting), "first_requests");
    }
    return;
  }
  const double now = clock_();
  std::array<int, kDriftStats> bins{};
  for (int i = 0; i < kDriftStats; ++i) {
    const auto& value = sample.values[size_t(i)];
    bins[size_t(i)] = value ? v.baseline->Bin(policy::DriftStatAt(i), *value) : -1;
  }
  for (policy::RollingBinCounts& w : v.windows) w.Add(now, bins);
  Score(v, now);
}

void DriftMonitor::Refresh() {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_();
  for (auto& [name, v] : models_) {
    if (v->baseline) Score(*v, now);
  }
}

void DriftMonitor::Score(VersionState& v, double now) {
  for (size_t w = 0; w < v.windows.size(); ++w) {
    for (int i = 0; i < kDriftStats; ++i) {
      const DriftStat stat = policy::DriftStatAt(i);
      const std::vector<double> counts = v.windows[w].Counts(now, stat);
      double n = 0;
      for (double c : counts) n += c;
      const double score = n >= options_.min_requests && n > 0
                               ? policy::PopulationStabilityIndex((*v.baseline)[stat].counts, counts)
                               : kNaN;
      v.scores[w][size_t(i)] = score;
      metrics_->drift_score.With({v.model, v.version, std::string(policy::DriftStatName(stat)),
                                  options_.windows[w].name})
          .Set(score);
      // An alarm holds until a scored window says otherwise (a window that emptied says nothing).
      if (std::isnan(score)) continue;
      const bool over = score > options_.threshold;
      if (over != v.alarmed[w][size_t(i)]) {
        v.alarmed[w][size_t(i)] = over;
        Alarm(v, w, stat, score, static_cast<int64_t>(n), over);
      }
    }
  }
}

void DriftMonitor::Alarm(VersionState& v, size_t window, DriftStat stat, double score, int64_t requests,
                         bool raised) {
  const std::string stat_name(policy::DriftStatName(stat));
  const std::string& window_name = options_.windows[window].name;
  if (raised) {
    metrics_->drift_alarms.With({v.model, v.version, stat_name, window_name}).Inc();
    spdlog::warn("drift alarm: model '{}' version {}: {} over the last {} has PSI {:.3f} > {} against the "
                 "baseline ({} replies in the window, {} in the baseline)",
                 v.model, v.version, stat_name, window_name, score, options_.threshold, requests,
                 v.baseline->requests);
  } else {
    spdlog::info("drift alarm cleared: model '{}' version {}: {} over the last {} has PSI {:.3f}", v.model,
                 v.version, stat_name, window_name, score);
  }
  if (!webhook_) return;
  const json event{{"event", raised ? "drift_alarm" : "drift_cleared"},
                   {"model", v.model},
                   {"version", v.version},
                   {"model_hash", v.hash},
                   {"stat", stat_name},
                   {"window", window_name},
                   {"score", score},
                   {"threshold", options_.threshold},
                   {"window_requests", requests},
                   {"baseline_requests", v.baseline->requests},
                   {"time", UtcNowIso()}};
  webhook_->Send(event.dump());
}

void DriftMonitor::Retire(VersionState& v) {
  for (const DriftWindow& w : options_.windows) {
    for (int i = 0; i < kDriftStats; ++i) {
      metrics_->drift_score.With({v.model, v.version, std::string(policy::DriftStatName(policy::DriftStatAt(i))), w.name})
          .Set(kNaN);
    }
  }
}

Result<json> DriftMonitor::TakeBaseline(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = models_.find(model);
  if (it == models_.end()) return NotFoundError("no model '" + model + "' is tracked for drift");
  VersionState& v = *it->second;
  const double now = clock_();
  policy::DriftBaseline next;
  if (!v.baseline) {
    if (v.collecting.empty()) return FailedPreconditionError("model '" + model + "' has no replies yet");
    next = policy::BuildBaseline(v.collecting);
  } else {
    // The longest window: the most replies, the least noise.
    size_t longest = 0;
    for (size_t w = 1; w < v.windows.size(); ++w) {
      if (v.windows[w].window_s() > v.windows[longest].window_s()) longest = w;
    }
    const int64_t n = v.windows[longest].Requests(now);
    if (n == 0) {
      return FailedPreconditionError("model '" + model + "' had no replies in the last " +
                                     options_.windows[longest].name);
    }
    std::array<std::vector<double>, kDriftStats> counts;
    for (int i = 0; i < kDriftStats; ++i) counts[size_t(i)] = v.windows[longest].Counts(now, policy::DriftStatAt(i));
    next = policy::RebaseCounts(*v.baseline, counts, n);
  }
  const std::string created = UtcNowIso();
  const std::string path = BaselinePath(v.model, v.version);
  if (!path.empty()) {
    // Written whole, then renamed: a crash leaves the old file or the new one, never half.
    const std::string text = policy::BaselineToJson(
        next, {{"model", v.model}, {"version", v.version}, {"model_hash", v.hash}, {"created", created}});
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::create_directories(options_.baseline_dir, ec);
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out || (std::filesystem::rename(tmp, path, ec), ec)) {
      std::filesystem::remove(tmp, ec);
      return UnavailableError("cannot write the baseline file " + path);
    }
  }
  const int64_t requests = next.requests;
  StartWindows(v, std::move(next), "admin");
  spdlog::info("drift: model '{}' version {}: new baseline of {} replies{}", v.model, v.version, requests,
               path.empty() ? "" : " written to " + path);
  json summary{{"model", v.model}, {"version", v.version}, {"model_hash", v.hash},
               {"baseline_requests", requests}, {"created", created}};
  if (!path.empty()) summary["file"] = path;
  return summary;
}

json DriftMonitor::Describe(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = models_.find(model);
  if (it == models_.end()) return nullptr;
  const VersionState& v = *it->second;
  json j{{"version", v.version}, {"threshold", options_.threshold}};
  if (!v.baseline) {
    j["baseline"] = {{"source", nullptr}, {"collected", v.collecting.size()},
                     {"needed", options_.baseline_requests}};
    return j;
  }
  j["baseline"] = {{"source", v.baseline_source}, {"requests", v.baseline->requests}};
  json windows = json::array();
  const double now = clock_();
  for (size_t w = 0; w < v.windows.size(); ++w) {
    json scores = json::object(), alarms = json::array();
    for (int i = 0; i < kDriftStats; ++i) {
      const std::string name(policy::DriftStatName(policy::DriftStatAt(i)));
      scores[name] = ScoreJson(v.scores[w][size_t(i)]);
      if (v.alarmed[w][size_t(i)]) alarms.push_back(name);
    }
    windows.push_back({{"window", options_.windows[w].name}, {"requests", v.windows[w].Requests(now)},
                       {"scores", scores}, {"alarms", alarms}});
  }
  j["windows"] = windows;
  return j;
}

}  // namespace vlmd::serve
