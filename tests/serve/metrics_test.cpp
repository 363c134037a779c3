// Prometheus metrics: exact rendered text, escaping, number spelling, bucket placement,
// concurrent updates, programmer-error checks, and the text-format linter in both directions.
#include "serve/obs/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "serve/obs/text_format.h"
#include "serve/prometheus_lint.h"

namespace vlmd::serve::obs {
namespace {

TEST(MetricsRenderTest, SmallRegistryExactText) {
  Registry r;
  CounterFamily& requests =
      r.AddCounter("vlm_requests_total", "Requests served.", {"route", "status"});
  GaugeFamily& depth = r.AddGauge("vlm_queue_depth", "Queued requests.");
  HistogramFamily& latency =
      r.AddHistogram("vlm_latency_seconds", "Request latency.", {}, {0.1, 0.5, 1});
  // Inserted out of order: children render sorted by label values.
  requests.With({"/v1/vlm/invoke", "500"}).Inc();
  requests.With({"/v1/vlm/invoke", "200"}).Inc(2);
  requests.With({"/health", "200"}).Inc();
  depth.With().Set(3);
  depth.With().Add(-1);
  latency.With().Observe(0.05);
  latency.With().Observe(0.25);
  latency.With().Observe(7);

  EXPECT_EQ(r.Render(),
            "# HELP vlm_requests_total Requests served.\n"
            "# TYPE vlm_requests_total counter\n"
            "vlm_requests_total{route=\"/health\",status=\"200\"} 1\n"
            "vlm_requests_total{route=\"/v1/vlm/invoke\",status=\"200\"} 2\n"
            "vlm_requests_total{route=\"/v1/vlm/invoke\",status=\"500\"} 1\n"
            "# HELP vlm_queue_depth Queued requests.\n"
            "# TYPE vlm_queue_depth gauge\n"
            "vlm_queue_depth 2\n"
            "# HELP vlm_latency_seconds Request latency.\n"
            "# TYPE vlm_latency_seconds histogram\n"
            "vlm_latency_seconds_bucket{le=\"0.1\"} 1\n"
            "vlm_latency_seconds_bucket{le=\"0.5\"} 2\n"
            "vlm_latency_seconds_bucket{le=\"1\"} 2\n"
            "vlm_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "vlm_latency_seconds_sum 7.3\n"
            "vlm_latency_seconds_count 3\n");
  EXPECT_EQ(requests.With({"/v1/vlm/invoke", "200"}).Value(), 2.0);
  EXPECT_EQ(latency.With().Count(), 3u);
  EXPECT_DOUBLE_EQ(latency.With().Sum(), 7.3);
}

TEST(MetricsRenderTest, ARemovedGaugeSeriesNoLongerRendersAndCanStartAgain) {
  Registry r;
  GaugeFamily& g = r.AddGauge("vlm_version_gauge", "Per version.", {"version"});
  g.With({"v1"}).Set(1);
  g.With({"v2"}).Set(2);
  g.Remove({"v1"});
  g.Remove({"v3"});  // absent: nothing happens
  EXPECT_EQ(r.Render(),
            "# HELP vlm_version_gauge Per version.\n"
            "# TYPE vlm_version_gauge gauge\n"
            "vlm_version_gauge{version=\"v2\"} 2\n");
  EXPECT_EQ(g.With({"v1"}).Value(), 0.0);  // a new series, from zero
}

TEST(MetricsRenderTest, UntouchedFamiliesRenderZeroSamplesOrNone) {
  Registry r;
  r.AddCounter("c_total", "C.");
  r.AddGauge("g", "G.");
  r.AddHistogram("h_seconds", "H.", {}, {1});
  r.AddCounter("labelled_total", "L.", {"kind"});  // no child yet: header only
  HistogramFamily& lh = r.AddHistogram("lh", "LH.", {"model"}, {2.5});
  lh.With({"m\"1"}).Observe(1);
  EXPECT_EQ(r.Render(),
            "# HELP c_total C.\n# TYPE c_total counter\nc_total 0\n"
            "# HELP g G.\n# TYPE g gauge\ng 0\n"
            "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"1\"} 0\nh_seconds_bucket{le=\"+Inf\"} 0\n"
            "h_seconds_sum 0\nh_seconds_count 0\n"
            "# HELP labelled_total L.\n# TYPE labelled_total counter\n"
            "# HELP lh LH.\n# TYPE lh histogram\n"
            "lh_bucket{model=\"m\\\"1\",le=\"2.5\"} 1\n"
            "lh_bucket{model=\"m\\\"1\",le=\"+Inf\"} 1\n"
            "lh_sum{model=\"m\\\"1\"} 1\nlh_count{model=\"m\\\"1\"} 1\n");
}

TEST(MetricsRenderTest, EscapesHelpAndLabelValues) {
  Registry r;
  CounterFamily& c = r.AddCounter("esc_total", "Back\\slash \"quoted\"\nsecond line", {"v"});
  c.With({"a\\b\"c\nd"}).Inc();
  c.With({"bad\xff utf8 \xc3\xa9"}).Inc();  // invalid byte replaced, valid é kept
  const std::string text = r.Render();
  EXPECT_EQ(text,
            "# HELP esc_total Back\\\\slash \"quoted\"\\nsecond line\n"
            "# TYPE esc_total counter\n"
            "esc_total{v=\"a\\\\b\\\"c\\nd\"} 1\n"
            "esc_total{v=\"bad\xef\xbf\xbd utf8 \xc3\xa9\"} 1\n");
  EXPECT_EQ(LintPrometheusText(text), "");
}

TEST(MetricsFormatTest, NumberSpelling) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(-2), "-2");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(2.5e-7), "2.5e-07");
  EXPECT_EQ(FormatValue(1e18), "1000000000000000000");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(inf), "+Inf");
  EXPECT_EQ(FormatValue(-inf), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  // Non-integral values round-trip exactly.
  for (double v : {1.0 / 3, 0.1 + 0.2, 123456.789, -9.87654321e-12, 4503599627370495.5}) {
    EXPECT_EQ(std::stod(FormatValue(v)), v) << FormatValue(v);
  }
}

TEST(MetricsFormatTest, NameRules) {
  EXPECT_TRUE(IsValidMetricName("vlm_requests_total"));
  EXPECT_TRUE(IsValidMetricName(":rule:name_1"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
  EXPECT_TRUE(IsValidLabelName("route"));
  EXPECT_TRUE(IsValidLabelName("_x9"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("9a"));
  EXPECT_FALSE(IsValidLabelName(""));
}

TEST(MetricsHistogramTest, LeIsInclusiveAtBoundaries) {
  Histogram h({0.1, 0.5, 1});
  h.Observe(-5);                                       // bucket 0
  h.Observe(0.1);                                      // bucket 0 (le inclusive)
  h.Observe(std::nextafter(0.1, 1.0));                 // bucket 1
  h.Observe(0.5);                                      // bucket 1
  h.Observe(1);                                        // bucket 2
  h.Observe(std::nextafter(1.0, 2.0));                 // +Inf
  h.Observe(std::numeric_limits<double>::infinity());  // +Inf
  h.Observe(std::nan(""));                             // +Inf, not bucket 0
  EXPECT_EQ(h.BucketCount(0), 2u);
  EXPECT_EQ(h.BucketCount(1), 2u);
  EXPECT_EQ(h.BucketCount(2), 1u);
  EXPECT_EQ(h.BucketCount(3), 3u);
  EXPECT_EQ(h.Count(), 8u);
}

TEST(MetricsHistogramTest, TrailingInfBoundIsDroppedAndEmptyBoundsWork) {
  Histogram h({1, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(h.upper_bounds(), std::vector<double>({1}));
  Registry r;
  r.AddHistogram("only_inf", "No finite bounds.", {}, {}).With().Observe(4);
  EXPECT_EQ(r.Render(),
            "# HELP only_inf No finite bounds.\n# TYPE only_inf histogram\n"
            "only_inf_bucket{le=\"+Inf\"} 1\nonly_inf_sum 4\nonly_inf_count 1\n");
}

TEST(MetricsConcurrencyTest, ExactTotalsUnderContention) {
  constexpr int kThreads = 4;
  constexpr int kIters = 10000;
  Registry r;
  CounterFamily& shared = r.AddCounter("shared_total", "Same child from every thread.");
  CounterFamily& per_thread = r.AddCounter("per_thread_total", "One child per thread.", {"t"});
  GaugeFamily& gauge = r.AddGauge("balance", "Up and down.");
  HistogramFamily& hist = r.AddHistogram("obs", "Observations.", {"t"}, {0.5, 1.5});
  std::atomic<bool> done{false};
  std::string lint_error;
  // Renders while the workers update: every intermediate text must be valid, in particular
  // +Inf == _count for every histogram series.
  std::thread renderer([&] {
    while (!done.load() && lint_error.empty()) lint_error = LintPrometheusText(r.Render());
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      const std::string label = "t" + std::to_string(t);
      for (int i = 0; i < kIters; ++i) {
        shared.With().Inc();
        per_thread.With({label}).Inc(0.5);
        gauge.With().Add(i % 2 == 0 ? 1 : -1);
        hist.With({"all"}).Observe(1);
        hist.With({label}).Observe(i % 2);
      }
    });
  }
  for (auto& w : workers) w.join();
  done = true;
  renderer.join();
  EXPECT_EQ(lint_error, "");
  EXPECT_EQ(shared.With().Value(), kThreads * kIters);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(per_thread.With({"t" + std::to_string(t)}).Value(), kIters * 0.5);
    const Histogram& h = hist.With({"t" + std::to_string(t)});
    EXPECT_EQ(h.Count(), static_cast<uint64_t>(kIters));
    EXPECT_EQ(h.BucketCount(0), static_cast<uint64_t>(kIters / 2));
    EXPECT_EQ(h.Sum(), kIters / 2);
  }
  EXPECT_EQ(gauge.With().Value(), 0);
  EXPECT_EQ(hist.With({"all"}).Count(), static_cast<uint64_t>(kThreads * kIters));
  EXPECT_EQ(hist.With({"all"}).Sum(), kThreads * kIters);
  EXPECT_EQ(LintPrometheusText(r.Render()), "");
}

TEST(MetricsConcurrencyTest, ChildReferencesStayValidWhileOthersAreCreated) {
  Registry r;
  CounterFamily& f = r.AddCounter("many_total", "Many children.", {"i"});
  Counter& first = f.With({"0"});
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) f.With({std::to_string(t * 500 + i)}).Inc();
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(&first, &f.With({"0"}));
  EXPECT_EQ(first.Value(), 1);
  EXPECT_EQ(f.With({"1999"}).Value(), 1);
}

class MetricsDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(MetricsDeathTest, ProgrammerErrorsAbort) {
  EXPECT_DEATH(
      {
        Registry r;
        r.AddCounter("c_total", "C.", {"a", "b"}).With({"only one"});
      },
      "has 2 labels, got 1 values");
  EXPECT_DEATH({ Registry().AddGauge("g", "G.").With({"x"}); }, "has 0 labels");
  EXPECT_DEATH({ Registry().AddCounter("bad-name", "x"); }, "invalid metric name");
  EXPECT_DEATH({ Registry().AddCounter("ok_total", "x", {"__reserved"}); }, "invalid label name");
  EXPECT_DEATH({ Registry().AddCounter("ok_total", "x", {"a:b"}); }, "invalid label name");
  EXPECT_DEATH({ Registry().AddCounter("ok_total", "x", {"a", "a"}); }, "repeated");
  EXPECT_DEATH({ Registry().AddHistogram("h", "x", {"le"}, {1}); }, "'le' is reserved");
  EXPECT_DEATH({ Registry().AddHistogram("h", "x", {}, {1, 1}); }, "strictly increasing");
  EXPECT_DEATH({ Registry().AddHistogram("h", "x", {}, {std::nan("")}); }, "not finite");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("dup", "x");
        r.AddCounter("dup", "y");
      },
      "already used");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddHistogram("lat", "x", {}, {1});
        r.AddCounter("lat_count", "y");
      },
      "already used");
  EXPECT_DEATH({ Counter().Inc(-1); }, "is not >= 0");
  EXPECT_DEATH({ Counter().Inc(std::nan("")); }, "is not >= 0");
}

// ---- Linter ----

TEST(PrometheusLintTest, AcceptsRenderOutput) {
  Registry r;
  r.AddCounter("a_total", "Help with \\ and\nnewline.", {"x", "y"}).With({"1", "\"q\""}).Inc(3);
  r.AddGauge("special", "Special values.", {"k"}).With({"inf"}).Set(HUGE_VAL);
  r.AddGauge("special2", "More.", {"k"}).With({"nan"}).Set(std::nan(""));
  r.AddGauge("neg", "Negative.").With().Set(-1e-300);
  HistogramFamily& h = r.AddHistogram("h_bytes", "Sizes.", {"kind"}, {1, 1024, 1e9});
  h.With({"b"}).Observe(5);
  h.With({"a"}).Observe(2e9);
  r.AddHistogram("h_empty", "", {}, {0.25});
  EXPECT_EQ(LintPrometheusText(r.Render()), "");
}

TEST(PrometheusLintTest, AcceptsOtherValidForms) {
  EXPECT_EQ(LintPrometheusText("# a free comment\n"
                               "# HELP x_total Something.\n"
                               "# TYPE x_total counter\n"
                               "x_total{a=\"1\",b=\"2\",} 1.5e3 1712345678000\n"
                               "x_total{b=\"1\",a=\"2\"}\t2\n"
                               "\n"
                               "# TYPE s summary\n"
                               "s{quantile=\"0.5\"} 0.25\n"
                               "s{quantile=\"0.99\"} NaN\n"
                               "s_sum 10\n"
                               "s_count 4\n"
                               "# TYPE u untyped\n"
                               "u -Inf\n"
                               "# TYPE g gauge\n"
                               "# HELP g Help after type.\n"
                               "g{} -.5\n"),
            "");
}

struct BrokenCase {
  const char* what;
  const char* text;
  const char* expected;  // substring of the error, which also names the line
};

TEST(PrometheusLintTest, RejectsBrokenInputs) {
  const BrokenCase cases[] = {
      {"empty body", "", "empty exposition"},
      {"missing trailing newline", "# TYPE a gauge\na 1", "line 2: missing newline"},
      {"sample without any TYPE", "a 1\n", "line 1: sample 'a' before any TYPE"},
      {"sample under HELP only", "# HELP a Help.\na 1\n",
       "line 2: sample 'a' in family 'a' without TYPE"},
      {"sample of another family", "# TYPE a gauge\na 1\nb 2\n",
       "line 3: sample 'b' does not belong"},
      {"second TYPE", "# TYPE a gauge\n# TYPE a gauge\na 1\n", "line 2: second TYPE"},
      {"second HELP", "# HELP a x\n# HELP a y\n# TYPE a gauge\n", "line 2: second HELP"},
      {"HELP after samples", "# TYPE a gauge\na 1\n# HELP a late\n", "line 3: HELP for 'a' after"},
      {"family not contiguous", "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# HELP a again\n",
       "line 5: lines of family 'a' are not contiguous"},
      {"unknown type", "# TYPE a thing\n", "line 1: unknown metric type"},
      {"text after type", "# TYPE a gauge extra\n", "line 1: unexpected text after the TYPE"},
      {"bad name in TYPE", "# TYPE 1a gauge\n", "line 1: invalid metric name"},
      {"bad HELP escape", "# HELP a bad \\t escape\n# TYPE a gauge\n",
       "line 1: invalid escape in HELP"},
      {"bad label escape", "# TYPE a gauge\na{x=\"\\t\"} 1\n", "line 2: invalid escape '\\t'"},
      {"unterminated label value", "# TYPE a gauge\na{x=\"abc} 1\n", "line 2: unterminated value"},
      {"unquoted label value", "# TYPE a gauge\na{x=1} 1\n", "line 2: expected '\"'"},
      {"missing comma", "# TYPE a gauge\na{x=\"1\" y=\"2\"} 1\n", "line 2: expected ',' or '}'"},
      {"reserved label name", "# TYPE a gauge\na{__name__=\"a\"} 1\n",
       "line 2: label name '__name__'"},
      {"bad label name", "# TYPE a gauge\na{1x=\"a\"} 1\n", "line 2: expected a label name"},
      {"repeated label", "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n",
       "line 2: label 'x' appears twice"},
      {"invalid UTF-8 label value", "# TYPE a gauge\na{x=\"\xff\"} 1\n",
       "line 2: value of label 'x' is not valid UTF-8"},
      {"garbage value", "# TYPE a gauge\na 12abc\n", "line 2: invalid sample value '12abc'"},
      {"lowercase inf", "# TYPE a gauge\na inf\n", "line 2: invalid sample value 'inf'"},
      {"hex value", "# TYPE a gauge\na 0x10\n", "line 2: invalid sample value"},
      {"no value", "# TYPE a gauge\na\n", "line 2: expected a blank before the value"},
      {"bad timestamp", "# TYPE a gauge\na 1 1.5\n", "line 2: invalid timestamp"},
      {"trailing blank", "# TYPE a gauge\na 1 \n", "line 2: invalid timestamp"},
      {"text after timestamp", "# TYPE a gauge\na 1 2 3\n",
       "line 2: unexpected text after the timestamp"},
      {"carriage return", "# TYPE a gauge\r\na 1\n", "line 1: carriage return"},
      {"duplicate series", "# TYPE a gauge\na{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 2\n",
       "line 3: duplicate series"},
      {"duplicate unlabelled series", "# TYPE a gauge\na 1\na{} 2\n", "line 3: duplicate series"},
      {"negative counter", "# TYPE c counter\nc -1\n", "line 2: counter value must be >= 0"},
      {"counter with suffix", "# TYPE c counter\nc_sum 1\n", "line 2: sample 'c_sum' does not fit"},
      {"non-cumulative buckets",
       "# TYPE h histogram\nh_bucket{le=\"1\"} 5\nh_bucket{le=\"2\"} 3\nh_bucket{le=\"+Inf\"} 5\n"
       "h_sum 1\nh_count 5\n",
       "line 3: histogram buckets are not cumulative"},
      {"le not increasing", "# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n",
       "line 3: le values of a histogram series are not increasing"},
      {"missing +Inf bucket", "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
       "line 2: histogram h{} has no le=\"+Inf\" bucket"},
      {"+Inf differs from _count",
       "# TYPE h histogram\nh_bucket{k=\"a\",le=\"+Inf\"} 2\nh_sum{k=\"a\"} 1\nh_count{k=\"a\"} "
       "3\n",
       "line 2: histogram h{k=\"a\"}: +Inf bucket differs from _count"},
      {"missing _count", "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\n",
       "line 2: histogram h{} has no _count"},
      {"missing _sum", "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n",
       "line 2: histogram h{} has no _sum"},
      {"histogram error found at next family",
       "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n# TYPE g gauge\ng 1\n",
       "line 2: histogram h{} has no _sum"},
      {"bucket without le", "# TYPE h histogram\nh_bucket 1\n",
       "line 2: histogram bucket without an 'le'"},
      {"bad le", "# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", "line 2: invalid le 'x'"},
      {"le on _sum", "# TYPE h histogram\nh_sum{le=\"1\"} 1\n",
       "line 2: 'le' label on a histogram _sum"},
      {"bare histogram sample", "# TYPE h histogram\nh 1\n", "line 2: sample 'h' does not fit"},
      {"family name clash", "# TYPE h histogram\n# TYPE h_count gauge\n",
       "line 2: sample name 'h_count' of family 'h_count' clashes"},
      {"summary without quantile", "# TYPE s summary\ns 1\n",
       "line 2: summary quantile sample without"},
      {"leading blank", "# TYPE a gauge\n a 1\n", "line 2: expected a metric name"},
  };
  for (const BrokenCase& c : cases) {
    const std::string err = LintPrometheusText(c.text);
    EXPECT_NE(err.find(c.expected), std::string::npos)
        << c.what << "\n  expected: " << c.expected << "\n  got: " << err;
  }
}

}  // namespace
}  // namespace vlmd::serve::obs
