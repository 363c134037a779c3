// The deployment files (SPEC O5) against the server they deploy: the Kubernetes manifest's config
// parses with vlmd's own parser and its probes and port are the server's; every metric the
// Grafana dashboard queries is one the server exports.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

#include "serve/config/config.h"
#include "server_harness.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;

std::string SourceText(const std::string& rel) {
  const std::vector<uint8_t> b = vlmd::testing::ReadFileBytes(vlmd::testing::SourcePath(rel));
  return std::string(b.begin(), b.end());
}

// The block scalar under `key: |` (its lines, less their common indentation).
std::string YamlBlock(const std::string& yaml, const std::string& key) {
  std::istringstream in(yaml);
  std::string line, out;
  bool inside = false;
  size_t indent = 0;
  while (std::getline(in, line)) {
    if (!inside) {
      const size_t at = line.find(key + ": |");
      if (at != std::string::npos) {
        inside = true;
        indent = std::string::npos;
      }
      continue;
    }
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos) {
      out += "\n";
      continue;
    }
    if (indent == std::string::npos) indent = first;
    if (first < indent) break;
    out += line.substr(indent) + "\n";
  }
  return out;
}

TEST(DeployFiles, TheKubernetesConfigParsesAndItsProbesAndPortAreTheServers) {
  const std::string yaml = SourceText("deploy/k8s/vlmd.yaml");
  const std::string doc = YamlBlock(yaml, "vlmd.json");
  ASSERT_FALSE(doc.empty());
  auto c = ParseConfig(doc, "/etc/vlmd", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->models.size(), 2u);
  for (const ModelSpec& m : c->models) {
    EXPECT_EQ(m.text_path.rfind("/models/", 0), 0u) << m.text_path;  // from the volume
    EXPECT_EQ(m.mmproj_path.rfind("/models/", 0), 0u) << m.mmproj_path;
  }
  ASSERT_EQ(c->routes.size(), 1u);  // the weighted canary
  ASSERT_TRUE(c->routes[0].is_split());
  EXPECT_EQ(c->routes[0].split[0].weight, 80);
  EXPECT_EQ(c->routes[0].split[1].weight, 20);
  EXPECT_EQ(c->default_model, c->routes[0].name);
  EXPECT_GT(c->server.memory_budget_bytes, 0u);
  EXPECT_TRUE(c->server.drift.enabled);  // deploy/prometheus/vlmd-alerts.yml alerts on its gauges
  EXPECT_EQ(c->server.host, "0.0.0.0");
  EXPECT_NE(yaml.find("containerPort: " + std::to_string(c->server.port)), std::string::npos);
  EXPECT_NE(yaml.find("readinessProbe:\n            httpGet: {path: /ready"), std::string::npos);
  EXPECT_NE(yaml.find("livenessProbe:\n            httpGet: {path: /health"), std::string::npos);
  // The grace period covers the preStop wait and the drain, and the drain the requests' deadline,
  // so that SIGTERM lets accepted requests finish.
  auto number_after = [&](const std::string& what) {
    const size_t at = yaml.find(what);
    return at == std::string::npos ? -1 : std::stoi(yaml.substr(at + what.size()));
  };
  const int grace = number_after("terminationGracePeriodSeconds: ");
  const int drain = number_after(R"("--drain-timeout", ")");
  const int pre_stop = number_after(R"(command: ["sleep", ")");
  EXPECT_GT(drain, 0);
  EXPECT_GT(pre_stop, 0);
  EXPECT_GE(drain, std::chrono::duration_cast<std::chrono::seconds>(c->server.prepare.timeout).count());
  EXPECT_GT(grace, pre_stop + drain);
  // The endpoints the probes name answer as the manifest expects: /health at once, /ready once
  // the models are loaded.
  testing::HarnessOptions o;
  o.load_model = false;
  testing::Harness h(o);
  auto client = h.Client();
  EXPECT_EQ(client->Get("/health")->status, 200);
  EXPECT_EQ(client->Get("/ready")->status, 503);
}

// "name type" from the # TYPE lines of a running server's /metrics.
std::set<std::string> ExportedTypes() {
  testing::Harness h;
  const std::string metrics = h.Client()->Get("/metrics")->body;
  std::set<std::string> types;
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) types.insert(line.substr(7));
  }
  return types;
}

// Checks every vlm_* metric `expr` names against the exported types; returns how many it named.
int CheckQueriedMetrics(const std::string& expr, const std::set<std::string>& types) {
  auto exported = [&](const std::string& name, const std::string& type) {
    return types.count(name + " " + type) > 0;
  };
  const std::regex metric(R"(vlm_[a-z_]+)");
  int queried = 0;
  for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end; it != end; ++it) {
    std::string name = it->str();
    ++queried;
    if (name.size() > 7 && name.compare(name.size() - 7, 7, "_bucket") == 0) {
      name.resize(name.size() - 7);
      EXPECT_TRUE(exported(name, "histogram")) << name << " in: " << expr;
    } else {
      EXPECT_TRUE(exported(name, "counter") || exported(name, "gauge")) << name << " in: " << expr;
    }
  }
  return queried;
}

TEST(DeployFiles, EveryMetricTheDashboardQueriesIsExported) {
  const json dash = json::parse(SourceText("deploy/grafana/vlmd-dashboard.json"));
  const std::set<std::string> types = ExportedTypes();
  int queried = 0;
  bool drift_row = false;
  for (const json& panel : dash.at("panels")) {
    if (panel.at("type") == "row") {  // a row groups panels and queries nothing
      drift_row |= panel.at("title") == "Drift";
      continue;
    }
    for (const json& target : panel.at("targets")) queried += CheckQueriedMetrics(target.at("expr"), types);
  }
  EXPECT_GT(queried, 20);
  EXPECT_TRUE(drift_row);
}

TEST(DeployFiles, TheAlertRulesQueryExportedMetricsAtTheDefaultDriftThreshold) {
  const std::string rules = SourceText("deploy/prometheus/vlmd-alerts.yml");
  const std::set<std::string> types = ExportedTypes();
  int queried = 0, alerts = 0;
  std::istringstream in(rules);
  for (std::string line; std::getline(in, line);) {
    if (line.find("- alert: ") != std::string::npos) ++alerts;
    const size_t at = line.find("expr: ");
    if (at == std::string::npos) continue;
    const std::string expr = line.substr(at + 6);
    queried += CheckQueriedMetrics(expr, types);
    // A rule on the score itself uses the server's default threshold (the file says to keep
    // them equal), or the "severe" level above it.
    const size_t gt = expr.find("(vlm_drift_score) > ");
    if (gt != std::string::npos) {
      const double level = std::stod(expr.substr(gt + 20));
      EXPECT_TRUE(level == DriftOptions{}.threshold || level > 2 * DriftOptions{}.threshold) << expr;
    }
  }
  EXPECT_EQ(alerts, 4);
  EXPECT_EQ(queried, alerts);
  EXPECT_NE(rules.find("groups:"), std::string::npos);
}

// Scale out (issue 25): the disruption budget, spread and autoscaler select the Deployment's
// pods; the autoscaler's metric is a gauge the server exports (and the adapter rule names it);
// the Ingress and the shipped HAProxy config hash the same header; their limits and timeouts
// are the server's.
TEST(DeployFiles, TheScaleOutObjectsFitTheDeploymentAndTheServer) {
  const std::string yaml = SourceText("deploy/k8s/vlmd.yaml");
  const std::string haproxy = SourceText("deploy/haproxy/vlmd.cfg");
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (const char* kind : {"kind: Deployment", "kind: PodDisruptionBudget",
                           "kind: HorizontalPodAutoscaler", "kind: Ingress"}) {
    EXPECT_EQ(count(yaml, std::string("\n") + kind + "\n"), 1) << kind;
  }
  // The Deployment's selector, the spread and the budget select the one pod label.
  EXPECT_EQ(count(yaml, "matchLabels: {app.kubernetes.io/name: vlmd}"), 3);
  EXPECT_NE(yaml.find("labels: {app.kubernetes.io/name: vlmd}\n      annotations:"), std::string::npos);
  EXPECT_NE(yaml.find("topologyKey: kubernetes.io/hostname"), std::string::npos);
  EXPECT_NE(yaml.find("scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vlmd}"),
            std::string::npos);
  const std::smatch metric = [&] {
    std::smatch m;
    std::regex_search(yaml, m, std::regex(R"re(metric: \{name: (vlm_[a-z_]+)\})re"));
    return m;
  }();
  ASSERT_EQ(metric.size(), 2u);
  EXPECT_EQ(ExportedTypes().count(metric[1].str() + " gauge"), 1u) << metric[1];
  EXPECT_NE(yaml.find("seriesQuery: '" + metric[1].str() + "{"), std::string::npos);
  // One routing header: ingress-nginx's $http_x_... variable and HAProxy's hdr(...).
  std::smatch ingress, lb;
  // The Ingress hashes a variable its snippet sets from the header (the request id without it).
  ASSERT_TRUE(std::regex_search(yaml, ingress, std::regex(R"re(set \$vlmd_route_key \$http_([a-z_]+);)re")));
  EXPECT_NE(yaml.find(R"(upstream-hash-by: "$vlmd_route_key")"), std::string::npos);
  EXPECT_NE(yaml.find(R"(if ($vlmd_route_key = "") { set $vlmd_route_key $request_id; })"), std::string::npos);
  ASSERT_TRUE(std::regex_search(haproxy, lb, std::regex(R"re(balance hdr\(([A-Za-z-]+)\))re")));
  std::string header = lb[1];
  for (char& ch : header) ch = ch == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  EXPECT_EQ(ingress[1].str(), header);
  EXPECT_NE(haproxy.find("hash-type consistent"), std::string::npos);
  EXPECT_NE(haproxy.find("option httpchk GET /ready"), std::string::npos);
  // Limits: the body size the server accepts passes; both wait longer than its deadline.
  const ServerOptions defaults;
  EXPECT_NE(yaml.find("proxy-body-size: \"" + std::to_string(defaults.max_body_bytes >> 20) + "m\""),
            std::string::npos);
  auto c = ParseConfig(YamlBlock(yaml, "vlmd.json"), "/etc/vlmd", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const int64_t deadline =
      std::chrono::duration_cast<std::chrono::seconds>(c->server.prepare.timeout).count();
  std::smatch read_timeout, server_timeout;
  ASSERT_TRUE(std::regex_search(yaml, read_timeout, std::regex(R"re(proxy-read-timeout: "([0-9]+)")re")));
  ASSERT_TRUE(std::regex_search(haproxy, server_timeout, std::regex(R"re(timeout server ([0-9]+)s)re")));
  EXPECT_GT(std::stoi(read_timeout[1]), deadline);
  EXPECT_GT(std::stoi(server_timeout[1]), deadline);
}

}  // namespace
}  // namespace vlmd::serve
