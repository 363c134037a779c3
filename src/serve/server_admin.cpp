// Admin endpoints (registered only when an admin key is configured; the pre-routing handler in
// server.cpp checks the key): model list and hot swap, route weights.
//   GET  /admin/models                       models with version, hash and files
//   POST /admin/models/{name}/reload         body (optional): {"model", "mmproj", "version"}
//   GET  /admin/routes                       routes with their targets and weights
//   POST /admin/routes/{name}/weights        body: {"weights": [{"model", "weight"}, ...]}
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "serve/server_handlers.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;

void SendJson(httplib::Response& res, const json& j) {
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

api::ApiError BadRequest(std::string message) {
  return {400, "invalid_request_error", "invalid_request", std::move(message)};
}

json ModelJson(const ModelHost& m) {
  return {{"name", m.spec().name},        {"version", m.spec().version},
          {"model_hash", m.hash()},       {"model", m.spec().text_path},
          {"mmproj", m.spec().mmproj_path}, {"demo", m.spec().demo}};
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

}  // namespace

void Server::Handlers::RegisterAdmin(httplib::Server& http) {
  http.Get("/admin/models", [this](const httplib::Request&, httplib::Response& res) {
    json models = json::array();
    for (const auto& m : s_.router_.Models()) models.push_back(ModelJson(*m));
    SendJson(res, {{"models", models}});
  });
  http.Post(R"(/admin/models/([^/]+)/reload)", [this](const httplib::Request& req,
                                                     httplib::Response& res) {
    const std::string name = req.matches[1];
    const auto current = s_.router_.Get(name);
    if (!current) return SendError(res, {404, "invalid_request_error", "model_not_found", "no model '" + name + "'"});
    std::optional<ModelSpec> spec;
    if (!req.body.empty()) {
      const json body = json::parse(req.body, nullptr, false);
      if (!body.is_object()) return SendError(res, BadRequest("body: expected a JSON object"));
      spec = current->spec();
      spec->version.clear();
      for (const auto& [k, v] : body.items()) {
        if (!v.is_string()) return SendError(res, BadRequest(k + ": expected a string"));
        if (k == "model") {
          spec->text_path = v.get<std::string>();
        } else if (k == "mmproj") {
          spec->mmproj_path = v.get<std::string>();
        } else if (k == "version") {
          spec->version = v.get<std::string>();
        } else {
          return SendError(res, BadRequest("unknown key '" + k + "' (model, mmproj, version)"));
        }
      }
      spec->demo = false;
    }
    Status s = s_.ReloadModel(name, spec);
    if (!s.ok()) {
      // The old version still serves; the reload itself failed.
      return SendError(res, {409, "server_error", "reload_failed", s.message()});
    }
    SendJson(res, {{"reloaded", ModelJson(*s_.router_.Get(name))}, {"previous_version", current->spec().version}});
  });
  http.Get("/admin/routes", [this](const httplib::Request&, httplib::Response& res) {
    json routes = json::array();
    for (const RouteConfig& r : s_.router_.Routes()) routes.push_back(RouteJson(r));
    SendJson(res, {{"routes", routes}, {"default_model", s_.router_.DefaultName()}});
  });
  http.Post(R"(/admin/routes/([^/]+)/weights)", [this](const httplib::Request& req,
                                                      httplib::Response& res) {
    const std::string name = req.matches[1];
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("weights") || !body["weights"].is_array()) {
      return SendError(res, BadRequest(R"(body: expected {"weights": [{"model": ..., "weight": ...}]})"));
    }
    std::vector<RouteTarget> weights;
    for (const json& w : body["weights"]) {
      if (!w.is_object() || !w.contains("model") || !w["model"].is_string() || !w.contains("weight") ||
          !w["weight"].is_number()) {
        return SendError(res, BadRequest("each weight needs a string model and a number weight"));
      }
      weights.push_back({w["model"].get<std::string>(), w["weight"].get<double>()});
    }
    Status s = s_.router_.SetSplitWeights(name, weights);
    if (!s.ok()) return SendError(res, api::FromStatus(s));
    spdlog::info("route '{}' weights changed: {}", name, body["weights"].dump());
    SendJson(res, RouteJson(*s_.router_.GetRoute(name)));
  });
}

}  // namespace vlmd::serve
