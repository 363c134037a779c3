// Router: name -> host table and route settings (see router.h).
#include "serve/config/router.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace vlmd::serve {

void Router::Put(std::shared_ptr<ModelHost> host) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& name = host->spec().name;
  auto it = std::find(order_.begin(), order_.end(), name);
  if (it == order_.end()) {
    order_.push_back(name);
    hosts_.push_back(std::move(host));
  } else {
    hosts_[size_t(it - order_.begin())] = std::move(host);
  }
}

std::shared_ptr<ModelHost> Router::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(order_.begin(), order_.end(), name);
  return it == order_.end() ? nullptr : hosts_[size_t(it - order_.begin())];
}

std::vector<std::shared_ptr<ModelHost>> Router::Models() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hosts_;
}

void Router::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  order_.clear();
  hosts_.clear();
}

void Router::SetRoutes(std::vector<RouteConfig> routes, std::string default_name) {
  std::lock_guard<std::mutex> lock(mu_);
  routes_ = std::move(routes);
  default_name_ = std::move(default_name);
}

std::optional<RouteConfig> Router::GetRoute(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const RouteConfig& r : routes_) {
    if (r.name == name) return r;
  }
  return std::nullopt;
}

std::vector<RouteConfig> Router::Routes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return routes_;
}

std::string Router::DefaultName() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!default_name_.empty()) return default_name_;
  return order_.empty() ? std::string() : order_.front();
}

Status Router::SetSplitWeights(const std::string& route, const std::vector<RouteTarget>& weights) {
  std::lock_guard<std::mutex> lock(mu_);
  for (RouteConfig& r : routes_) {
    if (r.name != route) continue;
    if (!r.is_split()) return InvalidArgumentError("route '" + route + "' routes by tiers, not weights");
    std::multiset<std::string> have, given;
    for (const RouteTarget& t : r.split) have.insert(t.model);
    double total = 0;
    for (const RouteTarget& t : weights) {
      if (!(t.weight >= 0)) return InvalidArgumentError("weights must be >= 0");
      given.insert(t.model);
      total += t.weight;
    }
    if (have != given) {
      return InvalidArgumentError("weights must name each model of route '" + route + "' once");
    }
    if (!(total > 0) || !std::isfinite(total)) {
      return InvalidArgumentError("the weights must sum to a finite number > 0");
    }
    // In the route's own order, whatever order they came in: a sticky pick walks the cumulative
    // weights in that order, and a reordering alone moved clients between versions.
    std::vector<bool> used(weights.size(), false);
    for (RouteTarget& t : r.split) {
      for (size_t i = 0; i < weights.size(); ++i) {
        if (!used[i] && weights[i].model == t.model) {
          t.weight = weights[i].weight;
          used[i] = true;
          break;
        }
      }
    }
    return Status::Ok();
  }
  return NotFoundError("no route '" + route + "'");
}

}  // namespace vlmd::serve
