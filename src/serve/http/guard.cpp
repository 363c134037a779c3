// Guard: the guard-rail objects of one server and their decision counters (see guard.h).
#include "serve/http/guard.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "serve/policy/api_keys.h"
#include "serve/policy/audit_log.h"
#include "serve/policy/image_allowlist.h"
#include "serve/policy/rate_limiter.h"
#include "serve/policy/refusal_sampler.h"

namespace vlmd::serve {
namespace {

// The token of "Bearer <token>"; nullopt for anything else.
// The scheme name is case-insensitive (RFC 9110 11.1).
std::optional<std::string_view> BearerToken(std::string_view header) {
  static constexpr std::string_view kBearer = "bearer ";
  if (header.size() <= kBearer.size()) return std::nullopt;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return std::nullopt;
  }
  return header.substr(kBearer.size());
}

// Constant time in the key's content (the length is not secret: keys are >= 16 random chars).
bool SameSecret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Wall-clock seconds since the epoch (the refusal sampler's clock).
double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// RFC 3339 UTC time with milliseconds.
std::string UtcAt(std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];  // room for any int the fields could hold (-Wformat-truncation)
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

std::string UtcNow() { return UtcAt(std::chrono::system_clock::now()); }

std::string UtcAtSeconds(double unix_s) {
  return UtcAt(std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(unix_s))));
}

}  // namespace

api::ApiError ForbiddenImage(const Status& status) {
  return {403, "permission_error", "image_not_allowed", status.message()};
}

Guard::Guard(GuardOptions options, ServerMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {}

Guard::~Guard() {
  // The refusals still being counted get their summary lines before the log closes.
  if (refusals_) WriteRefusalSummaries(std::numeric_limits<double>::infinity());
}

Result<std::unique_ptr<Guard>> Guard::Create(const GuardOptions& options, ServerMetrics* metrics) {
  std::unique_ptr<Guard> g(new Guard(options, metrics));
  if (!options.api_keys_file.empty()) {
    VLMD_ASSIGN_OR_RETURN(g->keys_, policy::ApiKeyStore::LoadFile(options.api_keys_file));
    spdlog::info("API keys: {} from {}", g->keys_->size(), options.api_keys_file);
  }
  g->limiter_ = std::make_unique<policy::RateLimiter>();
  if (!options.admin_key.empty()) {
    // The admin key opens hot swap and routing: it must not be guessable or shared with clients.
    if (options.admin_key.size() < 16) {
      return InvalidArgumentError("the admin key must have at least 16 characters");
    }
    if ((!options.api_key.empty() && SameSecret(options.admin_key, options.api_key)) ||
        (g->keys_ && g->keys_->Authenticate(options.admin_key) != nullptr)) {
      return InvalidArgumentError("the admin key must differ from every client API key");
    }
  }
  if (options.allowlist_mode != AllowlistMode::kOff && !options.image_allowlist_file.empty()) {
    VLMD_ASSIGN_OR_RETURN(g->allowlist_, policy::ImageAllowlist::Load(options.image_allowlist_file));
    spdlog::info("image allowlist ({}): {} digests from {}",
                 options.allowlist_mode == AllowlistMode::kEnforce ? "enforce" : "report",
                 g->allowlist_->size(), options.image_allowlist_file);
  }
  if (!options.word_filter_file.empty() && !options.filter_words.empty()) {
    return InvalidArgumentError("word filter: give either a file or inline words, not both");
  }
  if (!options.word_filter_file.empty()) {
    VLMD_ASSIGN_OR_RETURN(g->filter_, policy::WordFilter::LoadFile(options.word_filter_file));
  } else if (!options.filter_words.empty()) {
    VLMD_ASSIGN_OR_RETURN(g->filter_, policy::WordFilter::Compile(options.filter_words));
  }
  if (g->filter_) {
    spdlog::info("word filter: {} words, action {}", g->filter_->word_count(),
                 options.filter_action == policy::FilterAction::kMask ? "mask" : "block");
  }
  if (!options.audit_path.empty()) {
    policy::AuditOptions ao;
    ao.path = options.audit_path;
    ao.max_bytes = options.audit_max_bytes;
    ao.keep_files = options.audit_keep_files;
    ao.fsync = options.audit_fsync;
    VLMD_ASSIGN_OR_RETURN(g->audit_, policy::AuditLog::Open(ao));
    g->refusals_ = std::make_unique<policy::RefusalSampler>(options.audit_refusal_interval_s);
    spdlog::info("audit log: {}{}", ao.path, options.audit_prompts ? " (with prompt text)" : "");
  }
  return g;
}

void Guard::Count(const char* policy, const char* decision) {
  metrics_->policy_decisions.With({policy, decision}).Inc();
}

Result<Client> Guard::Admit(std::string_view authorization, double* retry_after_s,
                            std::string* limited_key_id) {
  if (!keys_ && options_.api_key.empty()) return Client{};
  const auto token = BearerToken(authorization);
  Client client;
  const policy::ApiKey* key = nullptr;
  if (token && keys_) key = keys_->Authenticate(*token);
  if (key != nullptr) {
    client.key_id = key->id;
  } else if (token && !options_.api_key.empty() && SameSecret(*token, options_.api_key)) {
    client.key_id = "default";
    client.shared_key = true;
  } else {
    Count("auth", "deny");
    return Status(StatusCode::kFailedPrecondition, "missing or wrong API key");
  }
  Count("auth", "allow");
  if (key != nullptr && key->rate_per_s > 0) {
    const policy::RateLimiter::Decision d = limiter_->Take(key->id, key->rate_per_s, key->burst);
    Count("rate_limit", d.allowed ? "allow" : "deny");
    if (!d.allowed) {
      if (retry_after_s != nullptr) *retry_after_s = d.retry_after_s;
      if (limited_key_id != nullptr) *limited_key_id = key->id;
      return ResourceExhaustedError("rate limit of key '" + key->id + "' exceeded");
    }
  }
  return client;
}

bool Guard::KnownClient(std::string_view authorization) const {
  if (!keys_ && options_.api_key.empty()) return true;
  const auto token = BearerToken(authorization);
  if (!token) return false;
  if (keys_ && keys_->Authenticate(*token) != nullptr) return true;
  return !options_.api_key.empty() && SameSecret(*token, options_.api_key);
}

bool Guard::AdminAuthorized(std::string_view authorization) {
  const auto token = BearerToken(authorization);
  const bool ok = admin_enabled() && token && SameSecret(*token, options_.admin_key);
  Count("admin", ok ? "allow" : "deny");
  return ok;
}

Status Guard::CheckImages(const std::vector<std::string>& images, std::vector<std::string>* hashes,
                          const char** decision) {
  hashes->clear();
  for (const std::string& bytes : images) {
    hashes->push_back(DigestHex(Sha256Of({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()})));
  }
  *decision = images.empty() ? "none" : allowlist_ ? "allow" : "off";
  if (!allowlist_ || images.empty()) return Status::Ok();
  RefreshAllowlist();
  for (size_t i = 0; i < hashes->size(); ++i) {
    if (allowlist_->Contains((*hashes)[i])) {
      Count("allowlist", "allow");
      continue;
    }
    if (options_.allowlist_mode == AllowlistMode::kReport) {
      Count("allowlist", "report");
      *decision = "report";
      spdlog::warn("image {} is not on the allowlist (report mode: allowed)", (*hashes)[i]);
      continue;
    }
    Count("allowlist", "deny");
    *decision = "deny";
    return Status(StatusCode::kFailedPrecondition,
                  "image " + std::to_string(i) + " (sha256 " + (*hashes)[i] + ") is not on the allowlist");
  }
  return Status::Ok();
}

void Guard::RefreshAllowlist() {
  if (Status s = allowlist_->ReloadIfChanged(); !s.ok()) {
    spdlog::error("image allowlist reload failed, keeping the previous list: {}", s.ToString());
  }
}

bool Guard::ImageStillAllowed(const std::string& sha256) {
  if (!allowlist_ || options_.allowlist_mode != AllowlistMode::kEnforce) return true;
  RefreshAllowlist();
  return allowlist_->Contains(sha256);
}

std::unique_ptr<policy::StreamFilter> Guard::NewFilter() const {
  if (!filter_) return nullptr;
  return std::make_unique<policy::StreamFilter>(filter_, options_.filter_action, options_.filter_mask);
}

bool Guard::ContainsFilteredWord(std::string_view text) const {
  return filter_ && policy::FilterText(filter_, policy::FilterAction::kBlock, text).matches > 0;
}

size_t Guard::max_filtered_word_bytes() const { return filter_ ? filter_->max_word_bytes() : 0; }

bool Guard::CompletesFilteredWord(std::string_view before, std::string_view text) const {
  if (!filter_) return false;
  policy::StreamFilter stream(filter_, policy::FilterAction::kBlock);
  stream.Prime(before);
  return stream.Feed(text).blocked || stream.Finish().blocked;
}

void Guard::CountFilter(const policy::StreamFilter& filter) {
  if (filter.blocked()) {
    Count("word_filter", "block");
  } else if (filter.matches() > 0) {
    Count("word_filter", "mask");
  } else {
    Count("word_filter", "pass");
  }
}

policy::TrustSignals Guard::Trust(const JobResult& r) {
  std::vector<float> entropy, logprobs;
  for (const auto& s : r.token_stats) {
    entropy.push_back(s.entropy_bits);
    logprobs.push_back(s.logprob);
  }
  const policy::TrustSignals t = policy::ComputeTrust(entropy, logprobs, options_.trust_flag_entropy_bits);
  if (t.flagged) metrics_->trust_flagged.With().Inc();
  return t;
}

Status Guard::AuditRefusal(nlohmann::json record, const std::string& remote_addr) {
  if (!audit_) return Status::Ok();
  const double now = UnixSeconds();
  WriteRefusalSummaries(now);
  if (refusals_ && !refusals_->Admit(remote_addr, now)) {
    Count("audit", "left_out");
    return Status::Ok();
  }
  return Audit(std::move(record));
}

void Guard::LeaveOutRefusal(const std::string& remote_addr) {
  if (!audit_) return;
  if (refusals_) refusals_->CountLeftOut(remote_addr, UnixSeconds());
  Count("audit", "left_out");
}

void Guard::WriteRefusalSummaries(double now_s) {
  if (!refusals_) return;
  for (const policy::RefusalSampler::Summary& sum : refusals_->TakeEnded(now_s)) {
    nlohmann::json line{{"event", "refusals_left_out"}, {"remote_addr", sum.addr},
                        {"count", sum.left_out}, {"first", UtcAtSeconds(sum.first_s)},
                        {"last", UtcAtSeconds(sum.last_s)}, {"time", UtcNow()}};
    Status s = audit_->Append(line);
    Count("audit", s.ok() ? "written" : "failed");
    if (!s.ok()) spdlog::error("audit log: {}", s.ToString());
  }
}

Status Guard::Audit(nlohmann::json record) {
  if (!audit_) return Status::Ok();
  WriteRefusalSummaries(UnixSeconds());
  record["time"] = UtcNow();
  Status s = audit_->Append(record);
  Count("audit", s.ok() ? "written" : "failed");
  if (!s.ok()) spdlog::error("audit log: {}", s.ToString());
  return s;
}

}  // namespace vlmd::serve
