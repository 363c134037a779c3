// The guard rails of one server (issue 6, SPEC P1-P4, P8) as one object the handlers consult:
// who the client is (API keys, rate limits), whether the admin endpoints are open, whether an
// image is allowed (SHA-256 allowlist), the output word filter, trust signals and the audit
// log. Every decision is counted in vlm_policy_decisions_total{policy,decision}.
// Thread-safe: handlers call it concurrently.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api/errors.h"
#include "serve/config/server_options.h"
#include "serve/hosting/job.h"
#include "serve/obs/server_metrics.h"
#include "serve/policy/trust.h"
#include "serve/policy/word_filter.h"

namespace vlmd::serve {
namespace policy {
class ApiKeyStore;
class AuditLog;
class RefusalSampler;
class ImageAllowlist;
class RateLimiter;
}  // namespace policy

struct Client {
  std::string key_id;  // "" when authentication is off; "default" for the single --api-key
  // Whether the key names one client (a keys-file key): the single --api-key is shared by every
  // client, so it tells them apart no more than no key does.
  bool key_is_client() const { return !key_id.empty() && !shared_key; }
  bool shared_key = false;  // authenticated with the single --api-key
};

class Guard {
 public:
  // Loads the files the options name (keys, allowlist, words) and opens the audit log. The
  // loaders' errors, naming the file; INVALID_ARGUMENT for an admin key shorter than 16
  // characters or equal to a client key.
  static Result<std::unique_ptr<Guard>> Create(const GuardOptions& options, ServerMetrics* metrics);
  ~Guard();

  // Authenticates `authorization` (the header value, "Bearer <key>", scheme in any case) and
  // applies the key's rate limit. FAILED_PRECONDITION for a missing/wrong key (HTTP 401),
  // RESOURCE_EXHAUSTED (retry_after_s and, when given, *limited_key_id set: the audit line
  // names the key that went over) over the rate (429).
  Result<Client> Admit(std::string_view authorization, double* retry_after_s,
                       std::string* limited_key_id = nullptr);
  // Whether the header carries a valid client key (or none is needed); no counting, no rate
  // token. The pre-routing check that refuses unknown clients before their body is read.
  bool KnownClient(std::string_view authorization) const;
  bool admin_enabled() const { return !options_.admin_key.empty(); }
  // Constant-time check of the admin key; counted as {admin, allow|deny}.
  bool AdminAuthorized(std::string_view authorization);

  // The allowlist over the encoded image bytes. Fills `hashes` (hex SHA-256 of each image, for
  // the audit log) even when off, and `decision` with "none" (no image), "off", "allow",
  // "report" (an unlisted image let through in report mode) or "deny". Enforce mode:
  // FAILED_PRECONDITION naming the first unlisted image (HTTP 403). Reloads the list when its
  // file changed.
  Status CheckImages(const std::vector<std::string>& images, std::vector<std::string>* hashes,
                     const char** decision);

  // Whether an image seen before (its hex SHA-256) may still go into a prompt: false only when
  // the allowlist enforces and no longer lists it (a stream's kept frames). Reloads the list
  // when its file changed.
  bool ImageStillAllowed(const std::string& sha256);

  // A fresh per-reply filter; nullptr when no words are configured.
  std::unique_ptr<policy::StreamFilter> NewFilter() const;
  // Whether `text` contains a filtered word (false without a filter).
  bool ContainsFilteredWord(std::string_view text) const;
  // The longest filtered word in bytes (0 without a filter): how far back a word can begin.
  size_t max_filtered_word_bytes() const;
  // Whether `text`, read after `before`, is or finishes a filtered word (words wholly inside
  // `before` do not count). False without a filter.
  bool CompletesFilteredWord(std::string_view before, std::string_view text) const;
  // Counts the filter's outcome for a finished reply.
  void CountFilter(const policy::StreamFilter& filter);

  // Trust signals of a finished job (counted when flagged).
  policy::TrustSignals Trust(const JobResult& result);

  bool audit_enabled() const { return audit_ != nullptr; }
  bool audit_prompts() const { return options_.audit_prompts; }
  // Appends one audit line (adds "time"); OK when the audit log is off. An error means the
  // line is NOT durable: the caller fails the request (500) rather than answer unaudited.
  Status Audit(nlohmann::json record);
  // The same for a refusal before authentication (401, or 429 at the door) from remote_addr:
  // written when it is the address's first in the refusal interval, else only counted; a
  // summary line per address and interval ("event": "refusals_left_out", "count": N) follows
  // with the next audit line after the interval, or at shutdown.
  Status AuditRefusal(nlohmann::json record, const std::string& remote_addr);
  // A refusal from remote_addr whose line cannot be written (no thread to write it): counted
  // into its address's summary line and the left-out metric, in memory only (no disk).
  void LeaveOutRefusal(const std::string& remote_addr);

  const GuardOptions& options() const { return options_; }

 private:
  Guard(GuardOptions options, ServerMetrics* metrics);
  void Count(const char* policy, const char* decision);
  // Reloads the allowlist when its file changed; a broken new file is logged, the old list kept.
  void RefreshAllowlist();
  void WriteRefusalSummaries(double now_s);  // the refusal intervals over by now_s

  GuardOptions options_;
  ServerMetrics* metrics_;
  std::unique_ptr<policy::ApiKeyStore> keys_;
  std::unique_ptr<policy::RateLimiter> limiter_;
  std::unique_ptr<policy::ImageAllowlist> allowlist_;
  std::shared_ptr<const policy::WordFilter> filter_;
  std::unique_ptr<policy::AuditLog> audit_;
  std::unique_ptr<policy::RefusalSampler> refusals_;  // with the audit log
};

// The 403 for an image refused by the allowlist.
api::ApiError ForbiddenImage(const Status& status);

}  // namespace vlmd::serve
