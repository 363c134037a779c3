// libFuzzer target for drift baseline files (serve/policy/drift.h): any bytes parsed as JSON then
// checked by BaselineFromJson. Traps when an accepted baseline breaks an invariant the monitor
// relies on: bins per statistic as its kind demands, Bin() inside the bins for any value, a
// round trip through BaselineToJson that changes nothing, a finite PSI of the baseline against
// itself, and a rolling window over its layout that counts what it is given.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/policy/drift.h"

namespace {

using namespace vlmd::serve::policy;  // NOLINT(build/namespaces): test harness

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  auto parsed = BaselineFromJson(j);
  if (!parsed.ok()) return 0;
  const DriftBaseline& b = *parsed;
  Check(b.requests >= 1);
  const double probes[] = {-1e300, -1, 0, 0.5, 1, 2, 3, 7.25, 1e300, std::nan("")};
  std::array<int, kDriftStats> bins{};
  for (int i = 0; i < kDriftStats; ++i) {
    const DriftStat s = DriftStatAt(i);
    const auto& st = b[s];
    if (CategoryCount(s) > 0) {
      Check(st.edges.empty());
      Check(st.counts.empty() || int(st.counts.size()) == CategoryCount(s));
    } else {
      Check(st.counts.empty() || st.counts.size() == st.edges.size() + 1);
    }
    for (double v : probes) {
      const int bin = b.Bin(s, v);
      Check(bin >= -1 && bin < b.bins(s));
      if (!st.counts.empty() && CategoryCount(s) == 0 && !std::isnan(v)) Check(bin >= 0);
    }
    bins[size_t(i)] = b.bins(s) > 0 ? b.bins(s) - 1 : -1;
    if (!st.counts.empty()) {
      const double psi = PopulationStabilityIndex(st.counts, st.counts);
      Check(std::isfinite(psi) && std::fabs(psi) < 1e-9);
    }
  }
  auto again = BaselineFromJson(nlohmann::json::parse(BaselineToJson(b, nlohmann::json::object())));
  Check(again.ok());
  for (int i = 0; i < kDriftStats; ++i) {
    Check(again->stats[size_t(i)].edges == b.stats[size_t(i)].edges);
    Check(again->stats[size_t(i)].counts == b.stats[size_t(i)].counts);
  }
  RollingBinCounts window(3600, b);
  window.Add(1000, bins);
  window.Add(1001, bins);
  Check(window.Requests(1001) == 2);
  for (int i = 0; i < kDriftStats; ++i) {
    const std::vector<double> counts = window.Counts(1001, DriftStatAt(i));
    Check(int(counts.size()) == b.bins(DriftStatAt(i)));
    if (!counts.empty()) Check(counts.back() == 2);
  }
  return 0;
}
