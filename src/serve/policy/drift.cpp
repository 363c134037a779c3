// Drift statistics: baselines, rolling windows and PSI (see drift.h).
#include "serve/policy/drift.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace vlmd::serve::policy {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, kDriftStats> kNames = {
    "mean_entropy", "trust_flagged",  "reply_tokens", "finish_reason",
    "word_filter_hit", "embedding_norm", "visual_tokens"};

constexpr double kSmoothing = 0.5;  // added to every bin count before taking shares

}  // namespace

std::string_view DriftStatName(DriftStat s) { return kNames[static_cast<size_t>(s)]; }

int CategoryCount(DriftStat s) {
  switch (s) {
    case DriftStat::kTrustFlagged:
    case DriftStat::kFilterHit:
      return 2;
    case DriftStat::kFinishReason:
      return 4;
    default:
      return 0;
  }
}

int FinishReasonCategory(std::string_view r) {
  if (r == "stop") return 0;
  if (r == "length") return 1;
  if (r == "content_filter") return 2;
  return 3;
}

int DriftBaseline::Bin(DriftStat s, double value) const {
  const Stat& st = (*this)[s];
  if (st.counts.empty() || std::isnan(value)) return -1;
  if (CategoryCount(s) > 0) {
    // Range first: casting a value outside int's range is undefined.
    if (!(value >= 0 && value < double(st.counts.size()))) return -1;
    const int c = static_cast<int>(value);
    return double(c) == value ? c : -1;
  }
  // First edge >= value: bin i holds edges[i-1] < v <= edges[i].
  return static_cast<int>(std::lower_bound(st.edges.begin(), st.edges.end(), value) - st.edges.begin());
}

DriftBaseline BuildBaseline(std::span<const DriftSample> samples) {
  DriftBaseline b;
  b.requests = static_cast<int64_t>(samples.size());
  for (int i = 0; i < kDriftStats; ++i) {
    const DriftStat s = DriftStatAt(i);
    std::vector<double> values;
    for (const DriftSample& x : samples) {
      if (x[s] && !std::isnan(*x[s])) values.push_back(*x[s]);
    }
    if (values.empty()) continue;
    DriftBaseline::Stat& st = b[s];
    if (const int categories = CategoryCount(s); categories > 0) {
      st.counts.assign(size_t(categories), 0.0);
    } else {
      // Edges sit between the baseline's distinct values, at its 1/k .. (k-1)/k quantiles
      // (ties merge bins), so that a value seen again, even a rounding step off, falls in the
      // same bin. A first edge just under the minimum keeps a bin for values below the
      // baseline's range, and the last bin takes those above it: a shift beyond the range shows
      // even when every baseline value was the same.
      std::sort(values.begin(), values.end());
      auto margin = [](double v) { return 1e-6 * std::max(1.0, std::fabs(v)); };
      st.edges.push_back(values.front() - margin(values.front()));
      for (int q = 1; q <= kMaxDriftBins; ++q) {
        const size_t at = q == kMaxDriftBins ? values.size() - 1 : values.size() * size_t(q) / kMaxDriftBins;
        const double v = values[at];
        const auto next = std::upper_bound(values.begin(), values.end(), v);
        const double e = next == values.end() ? v + margin(v) : v + (*next - v) / 2;
        if (e > st.edges.back()) st.edges.push_back(e);
      }
      st.counts.assign(st.edges.size() + 1, 0.0);
    }
    for (double v : values) {
      const int bin = b.Bin(s, v);
      if (bin >= 0) st.counts[size_t(bin)] += 1.0;
    }
  }
  return b;
}

double PopulationStabilityIndex(std::span<const double> expected, std::span<const double> actual) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (expected.empty() || expected.size() != actual.size()) return nan;
  double ne = 0, na = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    ne += expected[i];
    na += actual[i];
  }
  if (ne <= 0 || na <= 0) return nan;
  const double k = static_cast<double>(expected.size());
  double psi = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = (expected[i] + kSmoothing) / (ne + kSmoothing * k);
    const double a = (actual[i] + kSmoothing) / (na + kSmoothing * k);
    psi += (a - e) * std::log(a / e);
  }
  return psi;
}

std::string BaselineToJson(const DriftBaseline& b, const json& extra) {
  json stats = json::object();
  for (int i = 0; i < kDriftStats; ++i) {
    const DriftBaseline::Stat& st = b.stats[size_t(i)];
    if (st.counts.empty()) continue;
    stats[std::string(kNames[size_t(i)])] = {{"edges", st.edges}, {"counts", st.counts}};
  }
  json j = extra.is_object() ? extra : json::object();
  j["format"] = "vlmd-drift-baseline";
  j["format_version"] = 1;
  j["requests"] = b.requests;
  j["stats"] = stats;
  return j.dump(1, ' ', false, json::error_handler_t::replace);
}

Result<DriftBaseline> BaselineFromJson(const json& j) {
  auto bad = [](const std::string& why) { return InvalidArgumentError("drift baseline: " + why); };
  if (!j.is_object()) return bad("expected a JSON object");
  // (json::value() throws on a value of another type: compare the node itself.)
  if (!j.contains("format") || j["format"] != "vlmd-drift-baseline") {
    return bad("format: expected \"vlmd-drift-baseline\"");
  }
  if (!j.contains("format_version") || j["format_version"] != 1) return bad("format_version: expected 1");
  if (!j.contains("requests") || !j["requests"].is_number_integer() || j["requests"].get<int64_t>() < 1) {
    return bad("requests: expected a positive integer");
  }
  if (!j.contains("stats") || !j["stats"].is_object()) return bad("stats: expected an object");
  DriftBaseline b;
  b.requests = j["requests"].get<int64_t>();
  for (const auto& [name, v] : j["stats"].items()) {
    const auto it = std::find(kNames.begin(), kNames.end(), name);
    if (it == kNames.end()) return bad("stats: unknown statistic '" + name + "'");
    const DriftStat s = DriftStatAt(static_cast<int>(it - kNames.begin()));
    const std::string where = "stats." + name;
    if (!v.is_object() || !v.contains("edges") || !v["edges"].is_array() || !v.contains("counts") ||
        !v["counts"].is_array()) {
      return bad(where + ": expected {\"edges\": [...], \"counts\": [...]}");
    }
    DriftBaseline::Stat& st = b[s];
    for (const json& e : v["edges"]) {
      if (!e.is_number() || !std::isfinite(e.get<double>())) return bad(where + ".edges: expected finite numbers");
      if (!st.edges.empty() && e.get<double>() <= st.edges.back()) return bad(where + ".edges: must increase");
      st.edges.push_back(e.get<double>());
    }
    double total = 0;
    for (const json& c : v["counts"]) {
      // Bounded so that sums stay finite (1e12 replies is beyond any real baseline).
      if (!c.is_number() || !(c.get<double>() >= 0 && c.get<double>() <= 1e12)) {
        return bad(where + ".counts: expected numbers from 0 to 1e12");
      }
      st.counts.push_back(c.get<double>());
      total += st.counts.back();
    }
    const size_t want = CategoryCount(s) > 0 ? size_t(CategoryCount(s)) : st.edges.size() + 1;
    if (CategoryCount(s) > 0 && !st.edges.empty()) return bad(where + ".edges: a category has none");
    if (st.counts.size() != want) {
      return bad(where + ".counts: expected " + std::to_string(want) + " bins");
    }
    if (st.counts.size() > 64) return bad(where + ": too many bins");
    if (total <= 0) return bad(where + ".counts: all zero");
  }
  return b;
}

RollingBinCounts::RollingBinCounts(double window_s, const DriftBaseline& layout)
    : window_s_(window_s), slice_s_(window_s / kSlices), ring_(kSlices) {
  for (int i = 0; i < kDriftStats; ++i) offsets_[size_t(i) + 1] = offsets_[size_t(i)] + layout.stats[size_t(i)].counts.size();
  for (Slice& s : ring_) s.counts.assign(offsets_.back(), 0.0);
}

int64_t RollingBinCounts::SliceIndex(double now_s) const {
  return std::max<int64_t>(0, static_cast<int64_t>(std::floor(now_s / slice_s_)));
}

void RollingBinCounts::Add(double now_s, const std::array<int, kDriftStats>& bins) {
  const int64_t index = SliceIndex(now_s);
  Slice& slice = ring_[size_t(index % kSlices)];
  if (slice.index != index) {  // a slice that left the window is reused
    slice.index = index;
    slice.requests = 0;
    std::fill(slice.counts.begin(), slice.counts.end(), 0.0);
  }
  ++slice.requests;
  for (int i = 0; i < kDriftStats; ++i) {
    const size_t width = offsets_[size_t(i) + 1] - offsets_[size_t(i)];
    if (bins[size_t(i)] >= 0 && size_t(bins[size_t(i)]) < width) slice.counts[offsets_[size_t(i)] + size_t(bins[size_t(i)])] += 1.0;
  }
}

std::vector<double> RollingBinCounts::Counts(double now_s, DriftStat s) const {
  const size_t begin = offsets_[size_t(s)], end = offsets_[size_t(s) + 1];
  std::vector<double> out(end - begin, 0.0);
  const int64_t now_index = SliceIndex(now_s);
  for (const Slice& slice : ring_) {
    if (!Live(slice, now_index)) continue;
    for (size_t b = begin; b < end; ++b) out[b - begin] += slice.counts[b];
  }
  return out;
}

int64_t RollingBinCounts::Requests(double now_s) const {
  const int64_t now_index = SliceIndex(now_s);
  int64_t n = 0;
  for (const Slice& slice : ring_) {
    if (Live(slice, now_index)) n += slice.requests;
  }
  return n;
}

}  // namespace vlmd::serve::policy
