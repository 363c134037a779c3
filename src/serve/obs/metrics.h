// Prometheus metrics (text exposition format 0.0.4): counters, gauges and histograms with labels,
// registered once at start-up, updated lock-free from any thread, rendered for /metrics.
//
//   Registry r;
//   CounterFamily& c = r.AddCounter("vlm_requests_total", "Requests.", {"route", "status"});
//   c.With({"/v1/vlm/invoke", "200"}).Inc();
//   GaugeFamily& g = r.AddGauge("vlm_queue_depth", "Queued requests.");
//   g.With().Add(-1);
//   HistogramFamily& h = r.AddHistogram("vlm_embedding_duration_seconds", "Encode time.", {},
//                                       {0.1, 0.5, 1, 5});
//   h.With().Observe(0.23);
//   std::string text = r.Render();
//
// Thread-safety: every method of every class may be called concurrently. Misuse that only a
// programmer can cause (bad names, wrong label count, a counter going down) is a VLMD_CHECK.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

namespace vlmd::serve::obs {

// Label values in the order of the family's label names.
using LabelValues = std::vector<std::string>;

// A value that only goes up (requests served, tokens generated). Starts at 0.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `v`, which must be >= 0 (VLMD_CHECK: NaN and negative deltas are programmer errors).
  // Lock-free.
  void Inc(double v = 1.0);
  double Value() const;

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, bytes cached). Starts at 0. Any double is allowed.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v);
  void Add(double v);  // lock-free; pass a negative value to subtract
  double Value() const;

 private:
  std::atomic<double> value_{0.0};
};

// Distribution of observed values over fixed buckets (latencies in seconds, sizes in bytes).
// Bucket i counts observations v with upper_bounds[i-1] < v <= upper_bounds[i] (le is inclusive);
// the implicit last bucket (+Inf) takes everything above the last bound, and NaN.
class Histogram {
 public:
  // `upper_bounds` must be finite and strictly increasing (VLMD_CHECK); a trailing +Inf is
  // accepted and dropped because the +Inf bucket always exists. May be empty.
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Lock-free: one bucket increment and one add to the sum.
  void Observe(double v);
  // Number of observations: the sum of the bucket counts, so a rendered +Inf bucket always
  // equals the rendered _count even while other threads observe. Sum() may lag by the
  // observations in flight.
  uint64_t Count() const;
  double Sum() const;
  // Non-cumulative count of bucket `i`; i == upper_bounds().size() is the +Inf bucket.
  uint64_t BucketCount(size_t i) const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [upper_bounds_.size() + 1]
  std::atomic<double> sum_{0.0};
};

namespace internal {

// What every family shares: name, help, label schema, and the header and label rendering.
class FamilyBase {
 public:
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;
  virtual ~FamilyBase() = default;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends the HELP and TYPE lines and every sample, children sorted by label values.
  // Thread-safe; concurrent updates land in this render or the next.
  virtual void Render(std::string* out) const = 0;

 protected:
  // VLMD_CHECKs the metric name, every label name, and that label names are distinct.
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names);

  // VLMD_CHECKs that `values` has one entry per label name.
  void CheckLabelCount(const LabelValues& values) const;
  void RenderHeader(std::string_view type, std::string* out) const;
  // Appends "<name><suffix>{l1="v1",...[,extra_name="extra_value"]} <value>\n".
  void RenderSample(std::string_view suffix, const LabelValues& values, std::string_view extra_name,
                    std::string_view extra_value, double value, std::string* out) const;

 private:
  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
};

// Children of a family keyed by label values. Children are heap-allocated and, except through
// Remove, never removed, so references handed out stay valid for the family's lifetime.
// Lookups of existing children take a shared lock only.
template <typename Metric>
class ChildTable {
 public:
  // Returns the child for `values`, creating it with `make()` on first use.
  template <typename Make>
  Metric& GetOrCreate(const LabelValues& values, Make make) {
    {
      std::shared_lock lock(mu_);
      auto it = children_.find(values);
      if (it != children_.end()) return *it->second;
    }
    std::unique_lock lock(mu_);
    auto [it, inserted] = children_.try_emplace(values);
    if (inserted) it->second = make();
    return *it->second;
  }

  // Drops the child for `values` (no-op when absent). Only for families whose callers look a
  // child up at each update and keep no reference to it (see GaugeFamily::Remove).
  void Remove(const LabelValues& values) {
    std::unique_lock lock(mu_);
    children_.erase(values);
  }

  // Calls visit(values, child) for every child in sorted order of label values.
  template <typename Visit>
  void ForEach(Visit visit) const {
    std::shared_lock lock(mu_);
    for (const auto& [values, child] : children_) visit(values, *child);
  }

 private:
  mutable std::shared_mutex mu_;
  std::map<LabelValues, std::unique_ptr<Metric>> children_;
};

}  // namespace internal

// Families are normally created by Registry::Add*; a family without labels creates its single
// child at construction so that it renders a zero sample before the first update.
class CounterFamily final : public internal::FamilyBase {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  // The child for `values` (one per label name, VLMD_CHECK otherwise), created on first use.
  // The reference stays valid as long as the family. Thread-safe.
  Counter& With(const LabelValues& values = {});
  void Render(std::string* out) const override;

 private:
  internal::ChildTable<Counter> children_;
};

class GaugeFamily final : public internal::FamilyBase {
 public:
  GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names);
  // As CounterFamily::With.
  Gauge& With(const LabelValues& values = {});
  // Ends the series for `values` (it no longer renders): for series of something gone, e.g. a
  // replaced model version, whose label values would otherwise pile up. Invalidates references
  // from With(values): only for gauges whose callers look them up at each update (With(...).Set)
  // and never update a removed series again. Thread-safe.
  void Remove(const LabelValues& values);
  void Render(std::string* out) const override;

 private:
  internal::ChildTable<Gauge> children_;
};

class HistogramFamily final : public internal::FamilyBase {
 public:
  // `buckets`: as Histogram's upper bounds. "le" is not allowed as a label name.
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> buckets);
  // As CounterFamily::With.
  Histogram& With(const LabelValues& values = {});
  void Render(std::string* out) const override;

 private:
  std::vector<double> buckets_;
  internal::ChildTable<Histogram> children_;
};

// Owns the families of one exposition. Families render in registration order.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Register a family and return it; the reference stays valid as long as the registry.
  // VLMD_CHECK on an invalid name or label name, or on a name already used, including the
  // _bucket/_sum/_count sample names of a histogram. Thread-safe.
  CounterFamily& AddCounter(std::string name, std::string help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(std::string name, std::string help,
                        std::vector<std::string> label_names = {});
  HistogramFamily& AddHistogram(std::string name, std::string help,
                                std::vector<std::string> label_names, std::vector<double> buckets);

  // The whole exposition in text format 0.0.4 (Content-Type: text/plain; version=0.0.4).
  // Thread-safe; does not block updates of existing children.
  std::string Render() const;

 private:
  // VLMD_CHECKs that none of `sample_names` is taken, then takes them. Caller holds mu_.
  void ClaimNames(const std::vector<std::string>& sample_names);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<internal::FamilyBase>> families_;
  std::set<std::string> taken_names_;  // every sample name of every family
};

}  // namespace vlmd::serve::obs
