// Admin endpoints (registered only when an admin key is configured; the pre-routing handler in
// server.cpp checks the key): model list and hot swap, route weights.
//   GET  /admin/models                       models with version, hash and files
//   POST /admin/models/{name}/reload         body (optional): {"model", "mmproj", "version"}
//   POST /admin/models/{name}/baseline       drift alarms: recent replies become the baseline
//   GET  /admin/routes                       routes with their targets and weights
//   POST /admin/routes/{name}/weights        body: {"weights": [{"model", "weight"}, ...]}
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "serve/http/server_handlers.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;

void SendJson(HttpResponse& res, const json& j) {
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

api::ApiError BadRequest(std::string message) {
  return {400, "invalid_request_error", "invalid_request", std::move(message)};
}

json ModelJson(const ModelHost& m, const DriftMonitor* drift) {
  json j{{"name", m.spec().name},        {"version", m.spec().version},
         {"model_hash", m.hash()},       {"model", m.spec().text_path},
         {"mmproj", m.spec().mmproj_path}, {"demo", m.spec().demo}};
  if (m.decrypted()) j["sealed"] = {{"decrypted_in_memory", true}, {"locked", m.decrypted_locked()}};
  if (drift != nullptr) j["drift"] = drift->Describe(m.spec().name);
  return j;
}

json RouteJson(const RouteConfig& r) {
  json j{{"name", r.name}};
  if (r.is_split()) {
    json split = json::array();
    for (const RouteTarget& t : r.split) split.push_back({{"model", t.model}, {"weight", t.weight}});
    j["split"] = split;
  } else {
    j["tiers"] = {{"light", r.tiers[0]}, {"balanced", r.tiers[1]}, {"robust", r.tiers[2]}};
    j["thresholds"] = {r.thresholds.light_below, r.thresholds.robust_from};
  }
  return j;
}

const api::ApiError kAuditUnavailable{500, "server_error", "audit_unavailable",
                                      "the audit log cannot be written"};

// An admin request's body as its audit lines quote it.
std::string AuditedBody(const HttpRequest& req) { return req.body.size() <= 4096 ? req.body : "(too long)"; }

// An admin request's audit line: who (the admin key, its address) and what (the route).
json AdminAudit(const HttpRequest& req, std::string_view route, std::string request_id) {
  return {{"request_id", std::move(request_id)},
          {"key_id", "admin"},
          {"remote_addr", req.remote_addr},
          {"route", route}};
}

}  // namespace

// An admin action is audited before it acts: the line `record` with "phase": "requested" must be
// written, or nothing is done (500 audit_unavailable); its outcome follows in a second line.
bool Server::Handlers::AuditAdminIntent(nlohmann::json record, HttpResponse& res) {
  record["phase"] = "requested";
  if (s_.guard_->Audit(std::move(record)).ok()) return true;
  SendError(res, kAuditUnavailable);
  return false;
}

bool Server::Handlers::AuditAdminOutcome(nlohmann::json record, int status, HttpResponse& res) {
  record["status"] = status;
  if (s_.guard_->Audit(std::move(record)).ok()) return true;
  SendError(res, kAuditUnavailable);  // the action is done; the reply says it went unaudited
  return false;
}

// A model or route name may hold '/' (Hugging Face style, "org/model"): the name is everything
// between the prefix and the action, sent as is or with the slash percent-encoded.
void Server::Handlers::RegisterAdmin() {
  Get("/admin/models", [this](HttpRequest& req, HttpResponse& res) {
    // A read, audited as one line (it shows the models' file paths).
    if (!AuditAdminOutcome(AdminAudit(req, "/admin/models", s_.NextRequestId()), 200, res)) return;
    json models = json::array();
    for (const auto& m : s_.router_.Models()) models.push_back(ModelJson(*m, s_.drift_.get()));
    SendJson(res, {{"models", models}});
  });
  Post(R"(/admin/models/(.+)/reload)", kAdminBodyLimit, [this](HttpRequest& req, HttpResponse& res) {
    const std::string name = req.matches[0];
    json audit = AdminAudit(req, "/admin/models/{name}/reload", s_.NextRequestId());
    audit["model"] = name;
    audit["request"] = AuditedBody(req);
    if (!AuditAdminIntent(audit, res)) return;
    auto answer = [&](int status, const json& body, const std::string& error) {
      json outcome = audit;
      outcome["error"] = error;
      if (!AuditAdminOutcome(std::move(outcome), status, res)) return;
      if (status == 200) {
        SendJson(res, body);
      } else {
        SendError(res, {status, status >= 500 || status == 409 ? "server_error" : "invalid_request_error",
                        error, body.value("message", std::string())});
      }
    };
    // Not held across the reload: a reference to the serving version would keep it alive, and
    // counted in the memory budget, beside the old and new versions of a concurrent reload.
    if (!s_.router_.Get(name)) return answer(404, {{"message", "no model '" + name + "'"}}, "model_not_found");
    // Only the keys given change (applied under the reload lock, to whatever version serves
    // then); new files without a new version get a hash-derived one.
    Server::ModelPatch patch;
    const json body = req.body.empty() ? json::object() : json::parse(req.body, nullptr, false);
    if (!body.is_object()) return answer(400, {{"message", "body: expected a JSON object"}}, "invalid_request");
    for (const auto& [k, v] : body.items()) {
      if (!v.is_string()) return answer(400, {{"message", k + ": expected a string"}}, "invalid_request");
      const std::string value = v.get<std::string>();
      // Files by absolute path: a relative one would be the server's working directory's, which
      // the caller does not know (config files' paths are relative to the config file).
      if ((k == "model" || k == "mmproj") && !value.empty() && value.front() != '/') {
        return answer(400, {{"message", k + ": expected an absolute path"}}, "invalid_request");
      }
      if (k == "model") {
        patch.text_path = value;
      } else if (k == "mmproj") {
        patch.mmproj_path = value;
      } else if (k == "version") {
        patch.version = value;
      } else {
        return answer(400, {{"message", "unknown key (model, mmproj, version)"}}, "invalid_request");
      }
    }
    std::string previous;
    std::shared_ptr<ModelHost> now;  // what this reload put in
    Status s = s_.ReloadModel(name, &patch, &previous, &now);
    if (s.code() == StatusCode::kUnavailable && s_.draining()) {
      return answer(503, {{"message", s.message()}}, "shutting_down");
    }
    // 409: the reload failed and the old version still serves.
    if (!s.ok()) return answer(409, {{"message", s.message()}}, "reload_failed");
    // The outcome line says what this reload put in (the trail alone tells which weights serve).
    audit["version"] = now->spec().version;
    audit["model_hash"] = now->hash();
    audit["previous_version"] = previous;
    answer(200, {{"reloaded", ModelJson(*now, s_.drift_.get())}, {"previous_version", previous}}, "");
  });
  Post(R"(/admin/models/(.+)/baseline)", kAdminBodyLimit, [this](HttpRequest& req, HttpResponse& res) {
    const std::string name = req.matches[0];
    json audit = AdminAudit(req, "/admin/models/{name}/baseline", s_.NextRequestId());
    audit["model"] = name;
    if (!AuditAdminIntent(audit, res)) return;
    Result<json> taken = s_.drift_ ? s_.drift_->TakeBaseline(name)
                                   : Result<json>(FailedPreconditionError("drift alarms are off (config \"drift\")"));
    api::ApiError error;
    if (!taken.ok()) {
      // Nothing to take (or drift off) is the caller's conflict with the server's state.
      error = taken.status().code() == StatusCode::kFailedPrecondition
                  ? api::ApiError{409, "invalid_request_error", "conflict", taken.status().message()}
                  : api::FromStatus(taken.status());
    }
    if (!AuditAdminOutcome(audit, taken.ok() ? 200 : error.http_status, res)) return;
    if (!taken.ok()) return SendError(res, error);
    SendJson(res, {{"baseline", *taken}});
  });
  Get("/admin/routes", [this](HttpRequest& req, HttpResponse& res) {
    if (!AuditAdminOutcome(AdminAudit(req, "/admin/routes", s_.NextRequestId()), 200, res)) return;
    json routes = json::array();
    for (const RouteConfig& r : s_.router_.Routes()) routes.push_back(RouteJson(r));
    SendJson(res, {{"routes", routes}, {"default_model", s_.router_.DefaultName()}});
  });
  Post(R"(/admin/routes/(.+)/weights)", kAdminBodyLimit, [this](HttpRequest& req, HttpResponse& res) {
    const std::string name = req.matches[0];
    // Audited before the body is read: a malformed one gets its 400 in the trail too.
    json audit = AdminAudit(req, "/admin/routes/{name}/weights", s_.NextRequestId());
    audit["model_route"] = name;
    audit["request"] = AuditedBody(req);
    if (!AuditAdminIntent(audit, res)) return;
    auto refuse = [&](const api::ApiError& error) {
      json outcome = audit;
      outcome["error"] = error.code;
      if (AuditAdminOutcome(std::move(outcome), error.http_status, res)) SendError(res, error);
    };
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("weights") || !body["weights"].is_array()) {
      return refuse(BadRequest(R"(body: expected {"weights": [{"model": ..., "weight": ...}]})"));
    }
    std::vector<RouteTarget> weights;
    for (const json& w : body["weights"]) {
      if (!w.is_object() || !w.contains("model") || !w["model"].is_string() || !w.contains("weight") ||
          !w["weight"].is_number()) {
        return refuse(BadRequest("each weight needs a string model and a number weight"));
      }
      weights.push_back({w["model"].get<std::string>(), w["weight"].get<double>()});
    }
    Status s = s_.router_.SetSplitWeights(name, weights);
    if (!AuditAdminOutcome(audit, s.ok() ? 200 : api::FromStatus(s).http_status, res)) return;
    if (!s.ok()) return SendError(res, api::FromStatus(s));
    spdlog::info("route '{}' weights changed: {}", LogSafe(name), body["weights"].dump());
    const auto route = s_.router_.GetRoute(name);
    if (!route) return SendError(res, {404, "invalid_request_error", "not_found", "no route"});
    SendJson(res, RouteJson(*route));
  });
}

}  // namespace vlmd::serve
