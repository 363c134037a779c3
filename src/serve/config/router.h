// The served models by name and the routes over them (SPEC P5, P6): which ModelHost a request
// goes to. Hot swap replaces a name's host atomically (Put); requests already holding the old
// shared_ptr finish on it, and it is freed when the last one lets go.
// Thread-safe: one mutex, values copied out (a request resolves once, then holds its host).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "serve/config/config.h"
#include "serve/hosting/model_host.h"

namespace vlmd::serve {

class Router {
 public:
  // Adds the host under host->spec().name, or replaces the one there (hot swap).
  void Put(std::shared_ptr<ModelHost> host);
  std::shared_ptr<ModelHost> Get(const std::string& name) const;  // nullptr: no such model
  std::vector<std::shared_ptr<ModelHost>> Models() const;         // in the order first Put
  void Clear();

  // Routes and the default (a model or route name; "" = the first model). Targets are checked
  // when requests resolve (config parsing already refuses unknown names).
  void SetRoutes(std::vector<RouteConfig> routes, std::string default_name);
  std::optional<RouteConfig> GetRoute(const std::string& name) const;
  std::vector<RouteConfig> Routes() const;
  // The name a request without "model" goes to.
  std::string DefaultName() const;
  // Replaces the weights of split route `route`: `weights` must name exactly the route's models.
  // NOT_FOUND (no such route), INVALID_ARGUMENT (tier route, other models, all weights 0).
  Status SetSplitWeights(const std::string& route, const std::vector<RouteTarget>& weights);

 private:
  mutable std::mutex mu_;
  std::vector<std::string> order_;
  std::vector<std::shared_ptr<ModelHost>> hosts_;  // parallel to order_
  std::vector<RouteConfig> routes_;
  std::string default_name_;
};

}  // namespace vlmd::serve
