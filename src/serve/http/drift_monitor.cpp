// Drift alarms per model version (see drift_monitor.h).
#include "serve/http/drift_monitor.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/read_file.h"

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

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json ScoreJson(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

std::string StatName(int i) { return std::string(policy::DriftStatName(policy::DriftStatAt(i))); }

}  // namespace

struct DriftMonitor::VersionState {
  std::string model, version, hash;
  uint64_t id = 0;          // unique per tracked version (an address can be reused)
  uint64_t generation = 0;  // changes with every baseline installed (stale builds are dropped)
  // The latest replies, up to baseline_requests: the first ones form the baseline, and the admin
  // action takes the latest as a new one.
  std::deque<policy::DriftSample> recent;
  size_t since_load = 0;  // replies recorded (up to baseline_requests: collecting)
  bool building = false;  // a baseline is being built outside the lock
  std::optional<policy::DriftBaseline> baseline;
  std::string baseline_source;  // first_requests | file | admin
  std::vector<policy::RollingBinCounts> windows;
  std::vector<std::array<double, kDriftStats>> scores;  // per window, NaN: not scored
  std::vector<std::array<bool, kDriftStats>> alarmed;   // per window
};

Result<std::unique_ptr<DriftMonitor>> DriftMonitor::Create(DriftOptions options, ServerMetrics* metrics,
                                                           SecondsClock clock) {
  if (options.windows.empty()) return InvalidArgumentError("drift: no window");
  for (const DriftWindow& w : options.windows) {
    if (!(w.seconds >= 1)) return InvalidArgumentError("drift: window '" + w.name + "' is shorter than 1 s");
  }
  if (options.baseline_requests < 1 || options.min_requests < 1) {
    return InvalidArgumentError("drift: baseline_requests and min_requests must be >= 1");
  }
  if (!(options.threshold > 0)) return InvalidArgumentError("drift: the threshold must be > 0");
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

std::optional<policy::DriftBaseline> DriftMonitor::ReadBaselineFile(const std::string& model,
                                                                    const std::string& version,
                                                                    const std::string& hash) const {
  const std::string path = BaselinePath(model, version);
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return std::nullopt;
  auto file = ReadWholeFile(path, uint64_t{16} << 20);  // a baseline is a few histograms
  const json j = file.ok() ? json::parse(*file, nullptr, false) : json();
  auto parsed = file.ok() ? policy::BaselineFromJson(j) : Result<policy::DriftBaseline>(file.status());
  if (!parsed.ok()) {
    spdlog::warn("drift: model '{}' version {}: baseline file {} is not usable ({}); the first {} replies "
                 "form the baseline",
                 model, version, path, parsed.status().message(), options_.baseline_requests);
    return std::nullopt;
  }
  if (!j.contains("model_hash") || j["model_hash"] != hash) {
    spdlog::warn("drift: model '{}' version {}: baseline file {} was taken from other model files; the "
                 "first {} replies form the baseline",
                 model, version, path, options_.baseline_requests);
    return std::nullopt;
  }
  spdlog::info("drift: model '{}' version {}: baseline of {} replies from {}", model, version, parsed->requests,
               path);
  return std::move(*parsed);
}

void DriftMonitor::Track(const std::string& model, const std::string& version, const std::string& hash) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = models_.find(model);
    if (it != models_.end() && it->second->hash == hash && it->second->version == version) return;
  }
  std::optional<policy::DriftBaseline> from_file = ReadBaselineFile(model, version, hash);  // no lock held
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = models_[model];
  if (slot && slot->hash == hash && slot->version == version) return;  // tracked meanwhile
  if (slot) Retire(*slot, "version_replaced");
  slot = std::make_unique<VersionState>();
  slot->id = ++next_version_id_;
  slot->model = model;
  slot->version = version;
  slot->hash = hash;
  metrics_->drift_baseline_requests.With({model, version}).Set(0);
  if (from_file) StartWindows(*slot, std::move(*from_file), "file", nullptr);
}

void DriftMonitor::StartWindows(VersionState& v, policy::DriftBaseline baseline, std::string source,
                                const char* reason) {
  if (!v.scores.empty()) Retire(v, reason);  // the old baseline's alarms and scores
  ++v.generation;
  v.windows.clear();
  for (const DriftWindow& w : options_.windows) v.windows.emplace_back(w.seconds, baseline);
  v.scores.assign(options_.windows.size(), {});
  for (auto& s : v.scores) s.fill(kNaN);
  v.alarmed.assign(options_.windows.size(), {});
  // Every alarm series exists from the start (at 0), so that increase() sees the first alarm.
  for (const DriftWindow& w : options_.windows) {
    for (int i = 0; i < kDriftStats; ++i) metrics_->drift_alarms.With({v.model, v.version, StatName(i), w.name});
  }
  metrics_->drift_baseline_requests.With({v.model, v.version}).Set(static_cast<double>(baseline.requests));
  v.baseline = std::move(baseline);
  v.baseline_source = std::move(source);
}

void DriftMonitor::Record(const std::string& model, const std::string& hash, const policy::DriftSample& sample) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto it = models_.find(model);
  if (it == models_.end() || it->second->hash != hash) return;
  VersionState& v = *it->second;
  v.recent.push_back(sample);
  if (v.recent.size() > size_t(options_.baseline_requests)) v.recent.pop_front();
  ++v.since_load;
  if (!v.baseline) {
    if (v.since_load < size_t(options_.baseline_requests) || v.building) return;
    // The first replies are in: build their baseline (sorting up to 7 x baseline_requests
    // values) without holding up other requests.
    v.building = true;
    const std::vector<policy::DriftSample> samples(v.recent.begin(), v.recent.end());
    const uint64_t generation = v.generation, id = v.id;
    lock.unlock();
    policy::DriftBaseline built = policy::BuildBaseline(samples);
    lock.lock();
    // `v` may be gone: a replaced version's state is freed, and a new one may sit at its address
    // (compared by id, not address, so that it does not get the old version's baseline).
    const auto again = models_.find(model);
    if (again == models_.end() || again->second->id != id) return;  // replaced meanwhile
    VersionState& same = *again->second;
    same.building = false;
    if (same.baseline || same.generation != generation) return;  // an admin baseline came first
    spdlog::info("drift: model '{}' version {}: baseline of its first {} replies", same.model,
                 same.version, built.requests);
    StartWindows(same, std::move(built), "first_requests", nullptr);
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
      const std::vector<double>& expected = (*v.baseline)[stat].counts;
      const std::vector<double> counts = v.windows[w].Counts(now, stat);
      double n = 0, baseline_n = 0;
      for (double c : counts) n += c;
      for (double c : expected) baseline_n += c;
      // Both sides need min_requests replies that show the statistic: with fewer, PSI's noise
      // alone crosses the threshold (a statistic few baseline replies showed, e.g. the embedding
      // norm when images were rare, is not scored for this baseline).
      const double score = n >= options_.min_requests && baseline_n >= options_.min_requests
                               ? policy::PopulationStabilityIndex(expected, counts)
                               : kNaN;
      v.scores[w][size_t(i)] = score;
      metrics_->drift_score.With({v.model, v.version, StatName(i), options_.windows[w].name}).Set(score);
      // An alarm holds until a scored window says otherwise (a window that emptied says nothing).
      if (std::isnan(score)) continue;
      bool& alarmed = v.alarmed[w][size_t(i)];
      if (!alarmed && score > options_.threshold) {
        alarmed = true;
        Alarm(v, w, stat, score, static_cast<int64_t>(n), true);
      } else if (alarmed && score < kClearShare * options_.threshold) {
        alarmed = false;
        Alarm(v, w, stat, score, static_cast<int64_t>(n), false);
      }
    }
  }
}

void DriftMonitor::Alarm(VersionState& v, size_t window, DriftStat stat, double score, int64_t requests,
                         bool raised, const char* reason) {
  const std::string stat_name(policy::DriftStatName(stat));
  const std::string& window_name = options_.windows[window].name;
  if (raised) {
    metrics_->drift_alarms.With({v.model, v.version, stat_name, window_name}).Inc();
    spdlog::warn("drift alarm: model '{}' version {}: {} over the last {} has PSI {:.3f} > {} against the "
                 "baseline ({} replies in the window, {} in the baseline)",
                 v.model, v.version, stat_name, window_name, score, options_.threshold, requests,
                 v.baseline->requests);
  } else {
    spdlog::info("drift alarm cleared: model '{}' version {}: {} over the last {}: {}", v.model, v.version,
                 stat_name, window_name, reason ? std::string(reason) : fmt::format("PSI {:.3f}", score));
  }
  if (!webhook_) return;
  json event{{"event", raised ? "drift_alarm" : "drift_cleared"},
             {"model", v.model},
             {"version", v.version},
             {"model_hash", v.hash},
             {"stat", stat_name},
             {"window", window_name},
             {"score", ScoreJson(score)},
             {"threshold", options_.threshold},
             {"window_requests", requests},
             {"baseline_requests", v.baseline->requests},
             {"time", UtcNowIso()}};
  if (reason) event["reason"] = reason;
  webhook_->Send(Dump(event));
}

void DriftMonitor::Retire(VersionState& v, const char* reason) {
  // A replaced version's gauges end (every update looks its series up under mu_, and Record
  // ignores the old version's late replies): hot swaps with new version labels would otherwise
  // leave series of NaN behind without bound. A new baseline of the same version keeps them, at
  // NaN until the new windows score. (Its alarm counters stay, as counters do.)
  const bool replaced = reason != nullptr && std::string(reason) == "version_replaced";
  for (size_t w = 0; w < options_.windows.size(); ++w) {
    for (int i = 0; i < kDriftStats; ++i) {
      if (w < v.alarmed.size() && v.alarmed[w][size_t(i)]) {
        v.alarmed[w][size_t(i)] = false;
        Alarm(v, w, policy::DriftStatAt(i), kNaN, 0, false, reason);
      }
      const obs::LabelValues series{v.model, v.version, StatName(i), options_.windows[w].name};
      if (replaced) {
        metrics_->drift_score.Remove(series);
      } else {
        metrics_->drift_score.With(series).Set(kNaN);
      }
    }
  }
  if (replaced) metrics_->drift_baseline_requests.Remove({v.model, v.version});
}

Result<json> DriftMonitor::TakeBaseline(const std::string& model) {
  std::vector<policy::DriftSample> samples;
  std::string version, hash;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = models_.find(model);
    if (it == models_.end()) return NotFoundError("no model '" + model + "' is tracked for drift");
    const VersionState& v = *it->second;
    if (v.recent.empty()) return FailedPreconditionError("model '" + model + "' has no replies yet");
    samples.assign(v.recent.begin(), v.recent.end());
    version = v.version;
    hash = v.hash;
  }
  // Built and written without the lock: requests keep being counted meanwhile.
  policy::DriftBaseline next = policy::BuildBaseline(samples);
  const std::string created = UtcNowIso();
  const std::string path = BaselinePath(model, version);
  if (!path.empty()) {
    // Written whole, then renamed: a crash leaves the old file or the new one, never half of one.
    const std::string text = policy::BaselineToJson(
        next, {{"model", model}, {"version", version}, {"model_hash", hash}, {"created", created}});
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = models_.find(model);
    if (it == models_.end() || it->second->hash != hash || it->second->version != version) {
      return FailedPreconditionError("model '" + model + "' changed version while its baseline was taken");
    }
    StartWindows(*it->second, std::move(next), "admin", "new_baseline");
  }
  spdlog::info("drift: model '{}' version {}: new baseline of its latest {} replies{}", model, version, requests,
               path.empty() ? "" : " written to " + path);
  json summary{{"model", model}, {"version", version}, {"model_hash", hash},
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
    j["baseline"] = {{"source", nullptr}, {"collected", v.since_load}, {"needed", options_.baseline_requests}};
    return j;
  }
  j["baseline"] = {{"source", v.baseline_source}, {"requests", v.baseline->requests}};
  json windows = json::array();
  const double now = clock_();
  for (size_t w = 0; w < v.windows.size(); ++w) {
    json scores = json::object(), alarms = json::array();
    for (int i = 0; i < kDriftStats; ++i) {
      scores[StatName(i)] = ScoreJson(v.scores[w][size_t(i)]);
      if (v.alarmed[w][size_t(i)]) alarms.push_back(StatName(i));
    }
    windows.push_back({{"window", options_.windows[w].name}, {"requests", v.windows[w].Requests(now)},
                       {"scores", scores}, {"alarms", alarms}});
  }
  j["windows"] = windows;
  return j;
}

}  // namespace vlmd::serve
