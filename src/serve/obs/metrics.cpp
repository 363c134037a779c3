// Counter, gauge and histogram values, their families and the registry that renders them.
#include "serve/obs/metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "serve/obs/text_format.h"

namespace vlmd::serve::obs {
namespace {

// The failure half of a VLMD_CHECK whose message names the metric; callers test the condition
// first so that hot paths (Inc, With) never build the message.
[[noreturn]] void Fail(const char* expr, const std::string& msg) {
  ::vlmd::internal::CheckFailed(__FILE__, __LINE__, expr, msg.c_str());
}

std::vector<double> ValidatedBounds(std::vector<double> bounds) {
  if (!bounds.empty() && std::isinf(bounds.back()) && bounds.back() > 0) bounds.pop_back();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      Fail("std::isfinite(bound)",
           "histogram bucket bound " + FormatValue(bounds[i]) + " is not finite");
    }
    if (i > 0 && !(bounds[i - 1] < bounds[i])) {
      Fail("bounds[i - 1] < bounds[i]", "histogram bucket bounds must be strictly increasing");
    }
  }
  return bounds;
}

}  // namespace

void Counter::Inc(double v) {
  if (!(v >= 0)) Fail("v >= 0", "counter increment " + FormatValue(v) + " is not >= 0");
  value_.fetch_add(v, std::memory_order_relaxed);
}

double Counter::Value() const { return value_.load(std::memory_order_relaxed); }

void Gauge::Set(double v) { value_.store(v, std::memory_order_relaxed); }

void Gauge::Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }

double Gauge::Value() const { return value_.load(std::memory_order_relaxed); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(ValidatedBounds(std::move(upper_bounds))),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {}

void Histogram::Observe(double v) {
  // First bound with v <= bound; written as !(v <= b) so that NaN lands in +Inf, not bucket 0.
  const auto it = std::partition_point(upper_bounds_.begin(), upper_bounds_.end(),
                                       [v](double bound) { return !(v <= bound); });
  counts_[it - upper_bounds_.begin()].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

uint64_t Histogram::Count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) total += BucketCount(i);
  return total;
}

double Histogram::Sum() const { return sum_.load(std::memory_order_relaxed); }

uint64_t Histogram::BucketCount(size_t i) const {
  VLMD_CHECK(i <= upper_bounds_.size());
  return counts_[i].load(std::memory_order_relaxed);
}

namespace internal {

FamilyBase::FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {
  if (!IsValidMetricName(name_)) {
    Fail("IsValidMetricName(name)", "invalid metric name '" + name_ + "'");
  }
  for (size_t i = 0; i < label_names_.size(); ++i) {
    if (!IsValidLabelName(label_names_[i])) {
      Fail("IsValidLabelName(label)",
           "metric " + name_ + ": invalid label name '" + label_names_[i] + "'");
    }
    for (size_t j = 0; j < i; ++j) {
      if (label_names_[j] == label_names_[i]) {
        Fail("distinct label names",
             "metric " + name_ + ": label '" + label_names_[i] + "' repeated");
      }
    }
  }
}

void FamilyBase::CheckLabelCount(const LabelValues& values) const {
  if (values.size() != label_names_.size()) {
    Fail("values.size() == label_names.size()",
         "metric " + name_ + " has " + std::to_string(label_names_.size()) + " labels, got " +
             std::to_string(values.size()) + " values");
  }
}

void FamilyBase::RenderHeader(std::string_view type, std::string* out) const {
  out->append("# HELP ").append(name_).append(" ");
  AppendEscapedHelp(help_, out);
  out->append("\n# TYPE ").append(name_).append(" ").append(type).append("\n");
}

void FamilyBase::RenderSample(std::string_view suffix, const LabelValues& values,
                              std::string_view extra_name, std::string_view extra_value,
                              double value, std::string* out) const {
  out->append(name_).append(suffix);
  if (!values.empty() || !extra_name.empty()) {
    out->push_back('{');
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) out->push_back(',');
      out->append(label_names_[i]).append("=\"");
      AppendEscapedLabelValue(values[i], out);
      out->push_back('"');
    }
    if (!extra_name.empty()) {
      if (!values.empty()) out->push_back(',');
      out->append(extra_name).append("=\"");
      AppendEscapedLabelValue(extra_value, out);
      out->push_back('"');
    }
    out->push_back('}');
  }
  out->push_back(' ');
  AppendValue(value, out);
  out->push_back('\n');
}

}  // namespace internal

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : FamilyBase(std::move(name), std::move(help), std::move(label_names)) {
  if (this->label_names().empty()) With();
}

Counter& CounterFamily::With(const LabelValues& values) {
  CheckLabelCount(values);
  return children_.GetOrCreate(values, [] { return std::make_unique<Counter>(); });
}

void CounterFamily::Render(std::string* out) const {
  RenderHeader("counter", out);
  children_.ForEach([&](const LabelValues& values, const Counter& c) {
    RenderSample("", values, "", "", c.Value(), out);
  });
}

GaugeFamily::GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names)
    : FamilyBase(std::move(name), std::move(help), std::move(label_names)) {
  if (this->label_names().empty()) With();
}

Gauge& GaugeFamily::With(const LabelValues& values) {
  CheckLabelCount(values);
  return children_.GetOrCreate(values, [] { return std::make_unique<Gauge>(); });
}

void GaugeFamily::Remove(const LabelValues& values) {
  CheckLabelCount(values);
  children_.Remove(values);
}

void GaugeFamily::Render(std::string* out) const {
  RenderHeader("gauge", out);
  children_.ForEach([&](const LabelValues& values, const Gauge& g) {
    RenderSample("", values, "", "", g.Value(), out);
  });
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> buckets)
    : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
      buckets_(ValidatedBounds(std::move(buckets))) {
  for (const std::string& label : this->label_names()) {
    if (label == "le") {
      Fail("label != \"le\"", "histogram " + this->name() + ": label name 'le' is reserved");
    }
  }
  if (this->label_names().empty()) With();
}

Histogram& HistogramFamily::With(const LabelValues& values) {
  CheckLabelCount(values);
  return children_.GetOrCreate(values, [this] { return std::make_unique<Histogram>(buckets_); });
}

void HistogramFamily::Render(std::string* out) const {
  RenderHeader("histogram", out);
  children_.ForEach([&](const LabelValues& values, const Histogram& h) {
    // Read each bucket once and derive _count from them, so that +Inf == _count in this text.
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += h.BucketCount(i);
      RenderSample("_bucket", values, "le", FormatValue(buckets_[i]),
                   static_cast<double>(cumulative), out);
    }
    cumulative += h.BucketCount(buckets_.size());
    RenderSample("_bucket", values, "le", "+Inf", static_cast<double>(cumulative), out);
    RenderSample("_sum", values, "", "", h.Sum(), out);
    RenderSample("_count", values, "", "", static_cast<double>(cumulative), out);
  });
}

void Registry::ClaimNames(const std::vector<std::string>& sample_names) {
  for (const std::string& n : sample_names) {
    if (taken_names_.count(n) != 0) {
      Fail("name not yet registered", "metric name '" + n + "' is already used in this registry");
    }
  }
  taken_names_.insert(sample_names.begin(), sample_names.end());
}

CounterFamily& Registry::AddCounter(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  auto family =
      std::make_unique<CounterFamily>(std::move(name), std::move(help), std::move(label_names));
  CounterFamily& ref = *family;
  std::lock_guard lock(mu_);
  ClaimNames({ref.name()});
  families_.push_back(std::move(family));
  return ref;
}

GaugeFamily& Registry::AddGauge(std::string name, std::string help,
                                std::vector<std::string> label_names) {
  auto family =
      std::make_unique<GaugeFamily>(std::move(name), std::move(help), std::move(label_names));
  GaugeFamily& ref = *family;
  std::lock_guard lock(mu_);
  ClaimNames({ref.name()});
  families_.push_back(std::move(family));
  return ref;
}

HistogramFamily& Registry::AddHistogram(std::string name, std::string help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> buckets) {
  auto family = std::make_unique<HistogramFamily>(std::move(name), std::move(help),
                                                  std::move(label_names), std::move(buckets));
  HistogramFamily& ref = *family;
  std::lock_guard lock(mu_);
  const std::string& n = ref.name();
  ClaimNames({n, n + "_bucket", n + "_sum", n + "_count"});
  families_.push_back(std::move(family));
  return ref;
}

std::string Registry::Render() const {
  std::string out;
  std::lock_guard lock(mu_);
  for (const auto& family : families_) family->Render(&out);
  return out;
}

}  // namespace vlmd::serve::obs
