// Drift statistics of a served model version (issue 23 part 3): what each finished reply shows
// (token entropy, trust flag, length, finish reason, word-filter hit, image-embedding norm,
// visual tokens), a baseline distribution per statistic, rolling windows of bin counts, and the
// population stability index (PSI) between a window and the baseline.
//
// Why PSI: it compares binned distributions, so a window is a fixed array of counts per time
// slice (no raw samples kept, however long the window); it treats numeric and categorical
// statistics alike; and its scale is the one risk teams already use (< 0.1 stable, 0.1-0.25
// moderate, > 0.25 shifted). Its noise floor, (bins - 1) * (1/n + 1/N) for n window and N
// baseline requests, is why a window is scored only from a minimum request count.
//
// Pure values and functions; not thread-safe (DriftMonitor locks around them).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlmd::serve::policy {

enum class DriftStat : int {
  kMeanEntropy,    // mean token entropy of the reply (bits)
  kTrustFlagged,   // 0/1: the trust signals flagged the reply
  kReplyTokens,    // generated tokens
  kFinishReason,   // category: stop, length, content_filter, other
  kFilterHit,      // 0/1: the word filter masked or blocked something
  kEmbeddingNorm,  // mean L2 norm of the reply's visual-token embeddings (image requests only)
  kVisualTokens,   // visual tokens in the prompt (0 for text-only requests)
};
inline constexpr int kDriftStats = 7;

// "mean_entropy", "trust_flagged", "reply_tokens", "finish_reason", "word_filter_hit",
// "embedding_norm", "visual_tokens": the `stat` label of the metrics.
std::string_view DriftStatName(DriftStat s);
inline DriftStat DriftStatAt(int i) { return static_cast<DriftStat>(i); }

// Categorical statistics have fixed bins (their values are bin indexes); the others get
// quantile bins from the baseline.
int CategoryCount(DriftStat s);  // 0 for numeric statistics
// Bin of a finish reason: stop 0, length 1, content_filter 2, anything else (cancelled,
// deadline) 3.
int FinishReasonCategory(std::string_view finish_reason);

// One finished reply: a statistic it does not show (no image: no embedding norm) is nullopt.
struct DriftSample {
  std::array<std::optional<double>, kDriftStats> values;
  std::optional<double>& operator[](DriftStat s) { return values[static_cast<int>(s)]; }
  const std::optional<double>& operator[](DriftStat s) const { return values[static_cast<int>(s)]; }
};

// The reference distribution of one model version: per statistic, bin upper edges (numeric:
// bin i holds edges[i-1] < v <= edges[i], the last bin everything above) and the baseline's
// count per bin. A statistic the baseline never saw has no bins and is never scored.
struct DriftBaseline {
  struct Stat {
    std::vector<double> edges;   // numeric statistics only, strictly increasing
    std::vector<double> counts;  // one per bin; empty: not observed
  };
  std::array<Stat, kDriftStats> stats;
  int64_t requests = 0;  // replies it was built from

  const Stat& operator[](DriftStat s) const { return stats[static_cast<int>(s)]; }
  Stat& operator[](DriftStat s) { return stats[static_cast<int>(s)]; }
  // Bins of statistic `s` (0: not observed).
  int bins(DriftStat s) const { return static_cast<int>((*this)[s].counts.size()); }
  // The bin `value` falls in; -1 when the statistic has no bins (or a category is out of range).
  int Bin(DriftStat s, double value) const;
};

// At most this many quantile bins per numeric statistic (fewer when values tie), plus one for
// values under the baseline's range and one for values over it.
inline constexpr int kMaxDriftBins = 10;

// A baseline from raw replies: numeric statistics get bins whose edges lie between distinct
// values at the quantiles (so a value seen again, even a rounding step off, stays in its bin),
// with a bin under and one over the baseline's range; categorical statistics get their fixed
// categories. Then every reply is counted.
DriftBaseline BuildBaseline(std::span<const DriftSample> samples);
// PSI = sum_i (a_i - e_i) ln(a_i / e_i) over the bins' shares, each count smoothed by +0.5 so
// that an empty bin stays finite. 0 for identical shares; NaN when either side is empty or the
// sizes differ.
double PopulationStabilityIndex(std::span<const double> expected, std::span<const double> actual);

// The baseline file (JSON): {"format": "vlmd-drift-baseline", "format_version": 1, "requests",
// "stats": {name: {"edges": [...], "counts": [...]}}} plus whatever `extra` holds (model,
// version, model_hash, created). BaselineFromJson checks every field: INVALID_ARGUMENT naming
// the first problem.
std::string BaselineToJson(const DriftBaseline& b, const nlohmann::json& extra);
Result<DriftBaseline> BaselineFromJson(const nlohmann::json& j);

// Bin counts of the replies of the last `window_s` seconds, kept in kSlices time slices so that
// old replies slide out without being stored: memory is fixed whatever the traffic, and a
// reply leaves the window within window_s / kSlices of its age passing window_s.
class RollingBinCounts {
 public:
  static constexpr int kSlices = 60;
  // Bins per statistic as in `layout`.
  RollingBinCounts(double window_s, const DriftBaseline& layout);

  // Counts one reply at time `now_s` (seconds, any monotonic origin): bins[s] is its bin of
  // statistic s, or -1 when it does not show it.
  void Add(double now_s, const std::array<int, kDriftStats>& bins);
  // The counts per bin of statistic `s` over the window that ends at `now_s`.
  std::vector<double> Counts(double now_s, DriftStat s) const;
  int64_t Requests(double now_s) const;  // replies in the window
  double window_s() const { return window_s_; }

 private:
  struct Slice {
    int64_t index = -1;  // floor(time / slice length); -1: never used
    int64_t requests = 0;
    std::vector<double> counts;  // all statistics' bins, at offsets_
  };
  int64_t SliceIndex(double now_s) const;
  bool Live(const Slice& s, int64_t now_index) const {
    return s.index >= 0 && s.index > now_index - kSlices && s.index <= now_index;
  }

  double window_s_;
  double slice_s_;
  std::array<size_t, kDriftStats + 1> offsets_{};
  std::vector<Slice> ring_;
};

}  // namespace vlmd::serve::policy
