// Strict validator for the Prometheus text exposition format 0.0.4, for tests: checks what
// obs::Registry::Render() and the live server's /metrics emit. Header-only (test helpers that are
// not *_test.cpp are not compiled into the suite binary).
//
// Checked on every line: HELP/TYPE syntax and escapes; at most one HELP and one TYPE per family,
// both before its samples; lines of a family contiguous; every sample under a TYPE line and named
// after its family (histogram: _bucket/_sum/_count; summary: base/_sum/_count); sample grammar
// (name, {label="value",...} with valid names and \\ \" \n escapes, float value incl. +Inf/-Inf/
// NaN, optional integer timestamp, single spaces or tabs, nothing trailing); valid UTF-8; no
// duplicate series; counters non-negative; histogram series with le strictly increasing,
// cumulative counts, a +Inf bucket equal to _count, and a _sum; text ends with a newline.
// Stricter than Prometheus in two places: a sample without TYPE and an empty body are errors.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vlmd::serve {
namespace prometheus_lint_internal {

using Labels = std::vector<std::pair<std::string, std::string>>;  // sorted by name

inline bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsBlank(char c) { return c == ' ' || c == '\t'; }

inline bool IsMetricName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!(IsLetter(c) || c == '_' || c == ':' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

inline bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char b0 = b(i);
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 < 0x80) {
      len = 1;
    } else if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    if (len > 1 && (b(i + 1) < lo || b(i + 1) > hi)) return false;
    for (size_t k = 2; k < len; ++k) {
      if ((b(i + k) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// Parses a sample value or le/quantile label: [+-]?(digits[.digits]|.digits)([eE][+-]?digits)?,
// or +Inf, -Inf, Inf, NaN. Returns false on anything else.
inline bool ParseFloat(std::string_view s, double* out) {
  if (s == "+Inf" || s == "Inf") {
    *out = HUGE_VAL;
    return true;
  }
  if (s == "-Inf") {
    *out = -HUGE_VAL;
    return true;
  }
  if (s == "NaN") {
    *out = std::nan("");
    return true;
  }
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const size_t mantissa_start = i;
  size_t digits = 0;
  while (i < s.size() && IsDigit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && IsDigit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (i != s.size()) return false;
  double v = 0;
  const std::string_view body = s.substr(mantissa_start);
  const auto r = std::from_chars(body.data(), body.data() + body.size(), v);
  // Out of range (1e999) parses in Prometheus as +-Inf; from_chars reports it, accept it too.
  if (r.ec == std::errc::result_out_of_range) {
    v = HUGE_VAL;
  } else if (r.ec != std::errc() || r.ptr != body.data() + body.size()) {
    return false;
  }
  *out = negative ? -v : v;
  return true;
}

// Cursor over one line; every Parse* returns "" or an error message.
class LineParser {
 public:
  explicit LineParser(std::string_view line) : s_(line) {}

  bool AtEnd() const { return pos_ == s_.size(); }
  size_t SkipBlanks() {
    const size_t start = pos_;
    while (pos_ < s_.size() && IsBlank(s_[pos_])) ++pos_;
    return pos_ - start;
  }
  // Characters up to the next blank or end of line.
  std::string_view Token() {
    const size_t start = pos_;
    while (pos_ < s_.size() && !IsBlank(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }
  std::string_view Rest() {
    std::string_view r = s_.substr(pos_);
    pos_ = s_.size();
    return r;
  }
  std::string_view MetricName() {
    const size_t start = pos_;
    while (pos_ < s_.size() && (IsLetter(s_[pos_]) || s_[pos_] == '_' || s_[pos_] == ':' ||
                                (pos_ > start && IsDigit(s_[pos_])))) {
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }
  bool Peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }

  // Parses {name="value",...} (the opening brace is next). Labels come back sorted by name.
  std::string ParseLabels(Labels* labels) {
    ++pos_;  // '{'
    while (true) {
      if (Peek('}')) {
        ++pos_;
        break;
      }
      const size_t start = pos_;
      while (pos_ < s_.size() &&
             (IsLetter(s_[pos_]) || s_[pos_] == '_' || (pos_ > start && IsDigit(s_[pos_])))) {
        ++pos_;
      }
      const std::string name(s_.substr(start, pos_ - start));
      if (name.empty()) return "expected a label name at column " + std::to_string(pos_ + 1);
      if (name.rfind("__", 0) == 0) return "label name '" + name + "' uses the reserved __ prefix";
      if (!Peek('=')) return "expected '=' after label name '" + name + "'";
      ++pos_;
      if (!Peek('"')) return "expected '\"' to open the value of label '" + name + "'";
      ++pos_;
      std::string value;
      bool closed = false;
      while (pos_ < s_.size()) {
        const char c = s_[pos_++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value.push_back(c);
          continue;
        }
        if (pos_ == s_.size()) break;
        const char e = s_[pos_++];
        if (e == '\\' || e == '"') {
          value.push_back(e);
        } else if (e == 'n') {
          value.push_back('\n');
        } else {
          return std::string("invalid escape '\\") + e + "' in value of label '" + name + "'";
        }
      }
      if (!closed) return "unterminated value of label '" + name + "'";
      if (!IsValidUtf8(value)) return "value of label '" + name + "' is not valid UTF-8";
      for (const auto& [n, v] : *labels) {
        if (n == name) return "label '" + name + "' appears twice";
      }
      labels->emplace_back(name, std::move(value));
      if (Peek(',')) {
        ++pos_;
      } else if (!Peek('}')) {
        return "expected ',' or '}' after the value of label '" + name + "'";
      }
    }
    std::sort(labels->begin(), labels->end());
    return "";
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

// Validates HELP text escapes (only \\ and \n) and UTF-8.
inline std::string CheckHelpText(std::string_view help) {
  for (size_t i = 0; i < help.size(); ++i) {
    if (help[i] != '\\') continue;
    if (i + 1 == help.size() || (help[i + 1] != '\\' && help[i + 1] != 'n')) {
      return "invalid escape in HELP text (only \\\\ and \\n are allowed)";
    }
    ++i;
  }
  if (!IsValidUtf8(help)) return "HELP text is not valid UTF-8";
  return "";
}

struct HistogramSeries {
  int first_line = 0;
  bool has_buckets = false;
  double last_le = 0;
  double last_bucket = 0;
  bool has_inf = false;
  double inf_value = 0;
  bool has_sum = false;
  bool has_count = false;
  double count = 0;
};

struct Family {
  std::string name;
  std::string type;  // "" until the TYPE line
  bool has_help = false;
  bool has_samples = false;
  std::map<Labels, HistogramSeries> histogram_series;  // key: labels without le
};

class Linter {
 public:
  std::string Run(std::string_view text) {
    if (text.empty()) return "empty exposition (no lines at all)";
    int line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      ++line_no;
      const std::string_view line = text.substr(pos, end - pos);
      std::string err = LintLine(line, line_no);
      if (!err.empty()) return Report(line_no, err, line);
      pos = end + 1;
    }
    std::string err = FinishFamily();
    if (!err.empty()) return Report(line_no, err, "");
    if (text.back() != '\n') return At(line_no, "missing newline at the end of the text", "");
    return "";
  }

 private:
  // An error found at the end of a family belongs to the line of the series (error_line_).
  std::string Report(int line_no, const std::string& msg, std::string_view line) const {
    return error_line_ > 0 ? At(error_line_, msg, "") : At(line_no, msg, line);
  }

  static std::string At(int line_no, const std::string& msg, std::string_view line) {
    std::string out = "line " + std::to_string(line_no) + ": " + msg;
    if (!line.empty()) {
      out += " [" + std::string(line.substr(0, 160)) + (line.size() > 160 ? "...]" : "]");
    }
    return out;
  }

  std::string LintLine(std::string_view line, int line_no) {
    if (line.empty()) return "";  // the format ignores empty lines
    if (line.find('\r') != std::string_view::npos) return "carriage return in line";
    if (line[0] == '#') return LintComment(line);
    return LintSample(line, line_no);
  }

  // Makes `name` the current family, finishing the previous one. Errors when `name` had lines
  // earlier that were interrupted by another family.
  std::string SwitchFamily(const std::string& name) {
    if (current_ != nullptr && current_->name == name) return "";
    if (seen_families_.count(name)) {
      return "lines of family '" + name + "' are not contiguous";
    }
    std::string err = FinishFamily();
    if (!err.empty()) return err;
    seen_families_.insert(name);
    family_ = Family{};
    family_.name = name;
    current_ = &family_;
    return "";
  }

  std::string LintComment(std::string_view line) {
    LineParser p(line.substr(1));
    p.SkipBlanks();
    const std::string_view keyword = p.Token();
    if (keyword != "HELP" && keyword != "TYPE") return "";  // plain comment
    if (p.SkipBlanks() == 0) return std::string(keyword) + " needs a metric name";
    const std::string name(p.Token());
    if (!IsMetricName(name)) return "invalid metric name '" + name + "' in " + std::string(keyword);
    std::string err = SwitchFamily(name);
    if (!err.empty()) return err;
    if (keyword == "HELP") {
      if (current_->has_help) return "second HELP line for '" + name + "'";
      if (current_->has_samples) return "HELP for '" + name + "' after its samples";
      current_->has_help = true;
      if (p.AtEnd()) return "";
      if (p.SkipBlanks() == 0) return "expected a blank after the metric name";
      return CheckHelpText(p.Rest());
    }
    if (!current_->type.empty()) return "second TYPE line for '" + name + "'";
    if (current_->has_samples) return "TYPE for '" + name + "' after its samples";
    if (p.SkipBlanks() == 0) return "TYPE needs a type";
    const std::string type(p.Token());
    p.SkipBlanks();
    if (!p.AtEnd()) return "unexpected text after the TYPE";
    if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
        type != "untyped") {
      return "unknown metric type '" + type + "'";
    }
    current_->type = type;
    // The sample names this family will use must not be another family's.
    std::vector<std::string> names = {name};
    if (type == "histogram") names.push_back(name + "_bucket");
    if (type == "histogram" || type == "summary") {
      names.push_back(name + "_sum");
      names.push_back(name + "_count");
    }
    for (const std::string& n : names) {
      if (!sample_names_.insert(n).second) {
        return "sample name '" + n + "' of family '" + name + "' clashes with another family";
      }
    }
    return "";
  }

  std::string LintSample(std::string_view line, int line_no) {
    LineParser p(line);
    const std::string name(p.MetricName());
    if (name.empty()) return "expected a metric name at the start of the sample";
    if (current_ == nullptr) return "sample '" + name + "' before any TYPE line";
    Family& f = *current_;
    if (f.type.empty()) return "sample '" + name + "' in family '" + f.name + "' without TYPE";
    std::string suffix;
    if (name == f.name) {
      suffix = "";
    } else if (name.size() > f.name.size() && name.compare(0, f.name.size(), f.name) == 0) {
      suffix = name.substr(f.name.size());
    } else {
      return "sample '" + name + "' does not belong to the current family '" + f.name +
             "' (missing TYPE?)";
    }
    const bool is_histogram = f.type == "histogram";
    const bool is_summary = f.type == "summary";
    const bool suffix_ok = is_histogram
                               ? (suffix == "_bucket" || suffix == "_sum" || suffix == "_count")
                           : is_summary ? (suffix.empty() || suffix == "_sum" || suffix == "_count")
                                        : suffix.empty();
    if (!suffix_ok) {
      return "sample '" + name + "' does not fit " + f.type + " family '" + f.name + "'";
    }
    f.has_samples = true;

    Labels labels;
    if (p.Peek('{')) {
      std::string err = p.ParseLabels(&labels);
      if (!err.empty()) return err;
    }
    if (p.SkipBlanks() == 0) return "expected a blank before the value";
    const std::string_view value_text = p.Token();
    double value = 0;
    if (!ParseFloat(value_text, &value)) {
      return "invalid sample value '" + std::string(value_text) + "'";
    }
    if (!p.AtEnd()) {
      p.SkipBlanks();
      const std::string_view ts = p.Token();
      const size_t digits_from = (!ts.empty() && ts[0] == '-') ? 1 : 0;
      const bool ok = ts.size() > digits_from && ts.size() - digits_from <= 19 &&
                      std::all_of(ts.begin() + digits_from, ts.end(), IsDigit);
      if (!ok) return "invalid timestamp '" + std::string(ts) + "'";
      if (!p.AtEnd()) return "unexpected text after the timestamp";
    }

    std::string key = name;
    for (const auto& [n, v] : labels) key += '\0' + n + '\0' + v;
    if (!series_.insert(key).second) return "duplicate series";

    if (f.type == "counter" && !(value >= 0)) return "counter value must be >= 0";
    if (is_summary) return CheckSummarySample(suffix, labels, value);
    if (is_histogram) return CheckHistogramSample(suffix, std::move(labels), value, line_no);
    return "";
  }

  static std::string CheckSummarySample(const std::string& suffix, const Labels& labels,
                                        double value) {
    const auto q = std::find_if(labels.begin(), labels.end(),
                                [](const auto& l) { return l.first == "quantile"; });
    if (suffix.empty()) {
      double qv = 0;
      if (q == labels.end()) return "summary quantile sample without a 'quantile' label";
      if (!ParseFloat(q->second, &qv)) return "invalid quantile '" + q->second + "'";
    } else if (q != labels.end()) {
      return "'quantile' label on a summary _sum/_count sample";
    }
    if (suffix == "_count" && !(value >= 0)) return "summary _count must be >= 0";
    return "";
  }

  std::string CheckHistogramSample(const std::string& suffix, Labels labels, double value,
                                   int line_no) {
    const auto le_it =
        std::find_if(labels.begin(), labels.end(), [](const auto& l) { return l.first == "le"; });
    const bool has_le = le_it != labels.end();
    std::string le_text;
    if (has_le) {
      le_text = le_it->second;
      labels.erase(le_it);
    }
    HistogramSeries& s = current_->histogram_series[labels];
    if (s.first_line == 0) s.first_line = line_no;
    if (suffix != "_bucket") {
      if (has_le) return "'le' label on a histogram " + suffix + " sample";
      if (suffix == "_sum") {
        s.has_sum = true;
      } else {
        if (!(value >= 0)) return "histogram _count must be >= 0";
        s.has_count = true;
        s.count = value;
      }
      return "";
    }
    if (!has_le) return "histogram bucket without an 'le' label";
    double le = 0;
    if (!ParseFloat(le_text, &le) || std::isnan(le)) return "invalid le '" + le_text + "'";
    if (!(value >= 0)) return "histogram bucket count must be >= 0";
    if (s.has_buckets) {
      if (!(le > s.last_le)) return "le values of a histogram series are not increasing";
      if (value < s.last_bucket) return "histogram buckets are not cumulative";
    }
    s.has_buckets = true;
    s.last_le = le;
    s.last_bucket = value;
    if (std::isinf(le)) {
      s.has_inf = true;
      s.inf_value = value;
    }
    return "";
  }

  // End-of-family checks that need all lines of the family.
  std::string FinishFamily() {
    if (current_ == nullptr) return "";
    for (const auto& [labels, s] : current_->histogram_series) {
      std::string where = current_->name + "{";
      for (size_t i = 0; i < labels.size(); ++i) {
        where += (i ? "," : "") + labels[i].first + "=\"" + labels[i].second + "\"";
      }
      where += "}";
      error_line_ = s.first_line;
      if (!s.has_inf) return "histogram " + where + " has no le=\"+Inf\" bucket";
      if (!s.has_count) return "histogram " + where + " has no _count";
      if (!s.has_sum) return "histogram " + where + " has no _sum";
      if (s.inf_value != s.count) return "histogram " + where + ": +Inf bucket differs from _count";
      error_line_ = 0;
    }
    current_ = nullptr;
    return "";
  }

  Family family_;
  Family* current_ = nullptr;  // &family_ while a family is open
  std::set<std::string> seen_families_;
  std::set<std::string> sample_names_;  // names claimed by TYPE lines
  std::set<std::string> series_;        // name + labels of every sample
  int error_line_ = 0;                  // set by FinishFamily when it fails
};

}  // namespace prometheus_lint_internal

// Returns "" when `text` is a valid exposition, else "line N: what is wrong [the line]".
inline std::string LintPrometheusText(std::string_view text) {
  return prometheus_lint_internal::Linter().Run(text);
}

}  // namespace vlmd::serve
