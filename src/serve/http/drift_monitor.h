// Drift alarms (issue 23 part 3, SPEC P9): for each served model version, the statistics of its
// replies (policy/drift.h) in rolling windows against a baseline, scored with the population
// stability index. The baseline is the version's first `baseline_requests` replies, or a file
// that POST /admin/models/{name}/baseline wrote from its latest replies (read again when the
// version loads). A score over the threshold raises an alarm (vlm_drift_alarms_total, a log
// line and, when configured, a webhook event); it clears under kClearShare of the threshold. The
// score is the gauge vlm_drift_score{model,version,stat,window}: NaN while the window, or the
// baseline, holds fewer than min_requests replies showing the statistic.
// Thread-safe: handlers record replies concurrently; file I/O and baseline building run outside
// the lock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/status.h"
#include "serve/config/server_options.h"
#include "serve/http/webhook.h"
#include "serve/obs/server_metrics.h"
#include "serve/policy/drift.h"

namespace vlmd::serve {

class DriftMonitor {
 public:
  using SecondsClock = std::function<double()>;  // monotonic seconds (tests pass their own)
  // An alarm clears once its score falls under this share of the threshold, so that a score
  // hovering at the threshold does not raise it again and again.
  static constexpr double kClearShare = 0.8;

  // INVALID_ARGUMENT for a bad webhook URL or options the config parser would refuse (no
  // window, a window of no length, baseline_requests or min_requests under 1). `metrics` must
  // outlive the monitor.
  static Result<std::unique_ptr<DriftMonitor>> Create(DriftOptions options, ServerMetrics* metrics,
                                                      SecondsClock clock = {});
  ~DriftMonitor();

  // A version starts serving model `model`: its baseline comes from its file when one exists and
  // was taken from the same files (model_hash), else from its first replies. The version it
  // replaces is forgotten: its gauge series end and its late replies are not counted. Tracking
  // the version already tracked keeps its state.
  void Track(const std::string& model, const std::string& version, const std::string& hash);
  // Counts one finished reply of the version with `hash` (ignored unless it is the tracked one),
  // then scores the windows.
  void Record(const std::string& model, const std::string& hash, const policy::DriftSample& sample);
  // Scores every window at the current time (old replies slide out), e.g. before /metrics.
  void Refresh();

  // The admin action: the tracked version's latest replies (up to baseline_requests of them)
  // become its baseline, with bins of their own, written to the baseline file when a folder is
  // configured; the windows start afresh and open alarms clear. NOT_FOUND for an untracked model,
  // FAILED_PRECONDITION when it has no replies yet, UNAVAILABLE when the file cannot be written
  // (the baseline is then not changed). Returns a summary.
  Result<nlohmann::json> TakeBaseline(const std::string& model);
  // The state of a model's tracked version for /admin/models (null when untracked).
  nlohmann::json Describe(const std::string& model) const;

 private:
  struct VersionState;
  DriftMonitor(DriftOptions options, ServerMetrics* metrics, SecondsClock clock,
               std::unique_ptr<WebhookSender> webhook);
  // The file of a version's baseline ("" when no folder is configured).
  std::string BaselinePath(const std::string& model, const std::string& version) const;
  // The baseline in a version's file, when there is a usable one taken from files with `hash`.
  std::optional<policy::DriftBaseline> ReadBaselineFile(const std::string& model, const std::string& version,
                                                        const std::string& hash) const;
  // Under mu_: installs `baseline` (alarms still open clear with `reason`), windows afresh.
  void StartWindows(VersionState& v, policy::DriftBaseline baseline, std::string source, const char* reason);
  void Score(VersionState& v, double now);
  // A webhook event and log line for an alarm raised or cleared (reason: why, when cleared
  // other than by the score).
  void Alarm(VersionState& v, size_t window, policy::DriftStat stat, double score, int64_t requests, bool raised,
             const char* reason = nullptr);
  // Open alarms clear; gauges to NaN, or removed for a replaced version.
  void Retire(VersionState& v, const char* reason);

  DriftOptions options_;
  ServerMetrics* metrics_;
  SecondsClock clock_;
  std::unique_ptr<WebhookSender> webhook_;  // nullptr: no webhook
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<VersionState>> models_;  // by model name
  uint64_t next_version_id_ = 0;  // under mu_
};

}  // namespace vlmd::serve
