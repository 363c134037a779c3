// The config file's guard-rail sections that are more than a few keys: "drift" (drift alarms)
// and "redact" (redaction before inference; top level under "policies", per model, per route).
#include <optional>

#include "serve/api/image_inputs.h"
#include "serve/config/config_section.h"

namespace vlmd::serve::internal {
namespace {

// "30s", "15m", "1h", "7d": a positive whole number and a unit; seconds.
std::optional<double> ParseWindowDuration(const std::string& text) {
  if (text.size() < 2 || text.size() > 12) return std::nullopt;
  double unit = 0;
  switch (text.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: return std::nullopt;
  }
  int64_t n = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    n = n * 10 + (text[i] - '0');
  }
  if (n <= 0) return std::nullopt;
  return double(n) * unit;
}

}  // namespace

Status ParseDrift(const Section& s, const std::string& base_dir, DriftOptions* d) {
  VLMD_RETURN_IF_ERROR(s.CheckObject({"enabled", "windows", "baseline_requests", "min_requests",
                                      "threshold", "baseline_dir", "webhook"}));
  d->enabled = true;  // the section's presence turns the alarms on
  VLMD_RETURN_IF_ERROR(s.Get("enabled", &d->enabled));
  if (s.has("windows")) {
    std::vector<std::string> names;
    VLMD_RETURN_IF_ERROR(s.Get("windows", &names));
    if (names.empty() || names.size() > 4) return InvalidArgumentError(s.path("windows") + ": 1 to 4 windows");
    d->windows.clear();
    for (const std::string& name : names) {
      const auto seconds = ParseWindowDuration(name);
      if (!seconds || *seconds < 60 || *seconds > 30 * 86400) {
        return InvalidArgumentError(s.path("windows") + ": '" + name +
                                    "': expected a duration from 1m to 30d, e.g. \"1h\" or \"24h\"");
      }
      for (const DriftWindow& w : d->windows) {
        if (w.seconds == *seconds) return InvalidArgumentError(s.path("windows") + ": '" + name + "' twice");
      }
      d->windows.push_back({name, *seconds});
    }
  }
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("baseline_requests", &d->baseline_requests));
  if (d->baseline_requests < 10 || d->baseline_requests > 1'000'000) {
    return InvalidArgumentError(s.path("baseline_requests") + ": must be 10 to 1000000");
  }
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("min_requests", &d->min_requests));
  if (d->min_requests < 10 || d->min_requests > 1'000'000) {
    return InvalidArgumentError(s.path("min_requests") + ": must be 10 to 1000000");
  }
  // A baseline holds at most baseline_requests replies: with more required, no score, no alarm.
  if (d->min_requests > d->baseline_requests) {
    return InvalidArgumentError(s.path("min_requests") + ": " + std::to_string(d->min_requests) +
                                " is more than baseline_requests (" + std::to_string(d->baseline_requests) +
                                "): a baseline never holds that many replies, so drift would never be scored");
  }
  VLMD_RETURN_IF_ERROR(s.GetNonNegative("threshold", &d->threshold));
  if (d->threshold <= 0) return InvalidArgumentError(s.path("threshold") + ": must be > 0 (PSI; 0.25 is usual)");
  VLMD_RETURN_IF_ERROR(s.Get("baseline_dir", &d->baseline_dir));
  d->baseline_dir = Resolve(base_dir, d->baseline_dir);
  if (s.has("webhook")) {
    Section w(s.at("webhook"), s.path("webhook"));
    VLMD_RETURN_IF_ERROR(w.CheckObject({"url", "timeout_s", "retries"}));
    if (!w.has("url")) return InvalidArgumentError(w.path("url") + ": required");
    VLMD_RETURN_IF_ERROR(w.Get("url", &d->webhook_url));
    if (!api::internal::ParseHttpUrl(d->webhook_url).ok()) {
      return InvalidArgumentError(w.path("url") + ": expected an http(s) URL");
    }
    VLMD_RETURN_IF_ERROR(w.GetNonNegative("timeout_s", &d->webhook_timeout_s));
    if (d->webhook_timeout_s < 1 || d->webhook_timeout_s > 60) {
      return InvalidArgumentError(w.path("timeout_s") + ": must be 1 to 60");
    }
    VLMD_RETURN_IF_ERROR(w.GetNonNegative("retries", &d->webhook_retries));
    if (d->webhook_retries > 10) return InvalidArgumentError(w.path("retries") + ": must be 0 to 10");
  }
  return Status::Ok();
}

Status ParseRedact(const Section& s, const std::string& base_dir, redact::RedactOptions* r) {
  VLMD_RETURN_IF_ERROR(s.CheckObject({"kinds", "style", "min_score", "face_detector", "cascade_dir"}));
  if (!s.has("kinds")) {
    return InvalidArgumentError(s.path("kinds") + ": required ([\"faces\", \"plates\"], either, or [] for none)");
  }
  std::vector<std::string> kinds;
  VLMD_RETURN_IF_ERROR(s.Get("kinds", &kinds));
  r->faces = r->plates = false;
  for (const std::string& k : kinds) {
    redact::RedactOptions one;
    if (!redact::ParseRedactKinds(k, &one).ok()) {
      return InvalidArgumentError(s.path("kinds") + ": '" + k + "': expected \"faces\" or \"plates\"");
    }
    r->faces |= one.faces;
    r->plates |= one.plates;
  }
  std::string name;
  if (s.has("style")) {
    VLMD_RETURN_IF_ERROR(s.Get("style", &name));
    if (Status st = redact::ParseRedactStyle(name, &r->style); !st.ok()) {
      return InvalidArgumentError(s.path("style") + ": " + st.message());
    }
  }
  if (s.has("face_detector")) {
    VLMD_RETURN_IF_ERROR(s.Get("face_detector", &name));
    if (Status st = redact::ParseFaceDetector(name, &r->face_detector); !st.ok()) {
      return InvalidArgumentError(s.path("face_detector") + ": " + st.message());
    }
  }
  if (s.has("min_score")) {
    double min_score = 0;
    VLMD_RETURN_IF_ERROR(s.Get("min_score", &min_score));
    r->min_score = min_score;
  }
  VLMD_RETURN_IF_ERROR(s.Get("cascade_dir", &r->cascade_dir));
  r->cascade_dir = Resolve(base_dir, r->cascade_dir);
  // A missing cascade is a config error; the server loads each setting's detectors once, at
  // start-up (Server::Start, AddModel, SetRoutes), not here as well.
  if (r->enabled()) {
    if (Status st = redact::Redactor::CheckFiles(*r); !st.ok()) {
      return InvalidArgumentError(s.path("cascade_dir") + ": " + st.message());
    }
  }
  return Status::Ok();
}

}  // namespace vlmd::serve::internal
