// The config file parser: the README's full example (docs/vlmd.example.json) and hostile or
// mistaken files (unknown keys, wrong types, dangling route targets).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "serve/config/config.h"
#include "test_util.h"

namespace vlmd::serve {
namespace {

TEST(Config, TheDocumentedExampleParses) {
  // The example names key and word files next to it; parse its text against a scratch folder
  // that holds the one file parsing reads (the admin key).
  const std::string dir = (std::filesystem::temp_directory_path() / "vlmd-config-test").string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/admin.key") << "admin-0123456789abcdef\n";
  const std::vector<uint8_t> bytes = vlmd::testing::ReadFileBytes(vlmd::testing::SourcePath("docs/vlmd.example.json"));
  // The README shows this file whole (its block after "docs/vlmd.example.json"): the same text.
  const std::vector<uint8_t> readme_bytes = vlmd::testing::ReadFileBytes(vlmd::testing::SourcePath("README.md"));
  const std::string readme(readme_bytes.begin(), readme_bytes.end());
  const size_t link = readme.find("(docs/vlmd.example.json)");
  ASSERT_NE(link, std::string::npos);
  const size_t open = readme.find("```json\n", link), close = readme.find("```\n", open + 8);
  ASSERT_NE(open, std::string::npos);
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(readme.substr(open + 8, close - open - 8), std::string(bytes.begin(), bytes.end()))
      << "the README's config example differs from docs/vlmd.example.json";
  auto c = ParseConfig(std::string(bytes.begin(), bytes.end()), dir, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server.host, "0.0.0.0");
  EXPECT_EQ(c->server.prepare.token_budget, 4096);
  EXPECT_EQ(c->server.memory_budget_bytes, uint64_t{12288} << 20);
  EXPECT_EQ(c->server.max_concurrent_redactions, 2);
  EXPECT_EQ(c->server.body_budget_bytes, uint64_t{512} << 20);
  ASSERT_EQ(c->models.size(), 3u);
  EXPECT_EQ(c->models[0].name, "smolvlm-v1");
  EXPECT_EQ(c->models[0].version, "2025.06");
  EXPECT_EQ(c->models[0].text_path, dir + "/models/SmolVLM-256M-Instruct-Q8_0.gguf");
  EXPECT_EQ(c->models[2].version, "");  // from the hash at load
  EXPECT_EQ(c->models[0].engine.precision, engine::ops::Precision::kFast);
  EXPECT_EQ(c->models[0].scheduler.prefill_chunk, 128);
  EXPECT_EQ(c->models[0].scheduler.encode_tiles, 2);
  ASSERT_EQ(c->routes.size(), 2u);
  EXPECT_TRUE(c->routes[0].is_split());
  EXPECT_EQ(c->routes[0].split[1].model, "smolvlm-v2");
  EXPECT_EQ(c->routes[0].split[1].weight, 20);
  EXPECT_FALSE(c->routes[1].is_split());
  EXPECT_EQ(c->routes[1].tiers[2], "smolvlm-500m");
  EXPECT_EQ(c->default_model, "inspect");
  const GuardOptions& g = c->server.guard;
  EXPECT_EQ(g.admin_key, "admin-0123456789abcdef");
  EXPECT_EQ(g.api_keys_file, dir + "/keys.json");
  EXPECT_EQ(g.allowlist_mode, AllowlistMode::kEnforce);
  EXPECT_EQ(g.filter_action, policy::FilterAction::kMask);
  EXPECT_EQ(g.audit_path, "/var/log/vlmd/audit.jsonl");
  EXPECT_TRUE(g.audit_fsync);
  EXPECT_EQ(g.audit_keep_files, 10);
  EXPECT_EQ(g.audit_refusal_interval_s, 10.0);
  EXPECT_DOUBLE_EQ(g.trust_flag_entropy_bits, 4.0);
  EXPECT_EQ(c->server.tracing.otlp_endpoint, "http://otel-collector:4318/v1/traces");
  EXPECT_DOUBLE_EQ(c->server.tracing.sample_ratio, 0.25);
  EXPECT_EQ(c->server.streams.max_frames, 4);
  EXPECT_DOUBLE_EQ(c->server.streams.motion_high, 0.1);
  EXPECT_EQ(c->server.streams.max_bytes, uint64_t{256} << 20);
  EXPECT_EQ(c->server.streams.idle, std::chrono::seconds(600));
  EXPECT_EQ(c->server.streams.max_age, std::chrono::seconds(60));
  EXPECT_TRUE(c->server.redact.faces && c->server.redact.plates);
  const DriftOptions& d = c->server.drift;
  EXPECT_TRUE(d.enabled);
  ASSERT_EQ(d.windows.size(), 2u);
  EXPECT_EQ(d.windows[1].name, "24h");
  EXPECT_EQ(d.windows[1].seconds, 86400);
  EXPECT_EQ(d.baseline_requests, 1000);
  EXPECT_EQ(d.min_requests, 200);
  EXPECT_DOUBLE_EQ(d.threshold, 0.25);
  EXPECT_EQ(d.baseline_dir, "/var/lib/vlmd/drift");
  EXPECT_EQ(d.webhook_url, "http://alerts.internal:9000/vlmd-drift");
  EXPECT_EQ(d.webhook_retries, 3);
  std::filesystem::remove_all(dir);
}

TEST(Config, RedactionIsPerServerModelOrRouteAndItsDetectorsMustLoad) {
  auto off = ParseConfig("{}", "/etc/vlmd", {});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->server.redact.enabled());
  auto c = ParseConfig(R"({
    "policies": {"redact": {"kinds": ["faces", "plates"], "style": "pixelate", "min_score": 0.5}},
    "models": [{"name": "a", "model": "a.gguf", "redact": {"kinds": []}},
               {"name": "b", "model": "b.gguf", "redact": {"kinds": ["faces"], "face_detector": "hog"}},
               {"name": "c", "model": "c.gguf"}],
    "routes": [{"name": "r", "split": [{"model": "c", "weight": 1}], "redact": {"kinds": ["plates"], "style": "fill"}}]
  })", "/etc/vlmd", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->server.redact.faces && c->server.redact.plates);
  EXPECT_EQ(c->server.redact.style, redact::RedactStyle::kPixelate);
  ASSERT_TRUE(c->server.redact.min_score.has_value());
  EXPECT_DOUBLE_EQ(*c->server.redact.min_score, 0.5);
  EXPECT_FALSE(c->models[1].redact->min_score.has_value());  // unset: the detectors' own thresholds
  EXPECT_EQ(c->server.redact.face_detector, redact::FaceDetector::kHaar);  // the default
  ASSERT_TRUE(c->models[0].redact.has_value());
  EXPECT_FALSE(c->models[0].redact->enabled());  // off for this model
  EXPECT_EQ(c->models[1].redact->face_detector, redact::FaceDetector::kHog);
  EXPECT_FALSE(c->models[2].redact.has_value());  // the server's
  ASSERT_TRUE(c->routes[0].redact.has_value());
  EXPECT_TRUE(c->routes[0].redact->plates && !c->routes[0].redact->faces);
  EXPECT_EQ(c->routes[0].redact->style, redact::RedactStyle::kFill);
}

TEST(Config, DriftAlarmsAreOffUnlessConfiguredAndTakeDurations) {
  auto off = ParseConfig("{}", "/etc/vlmd", {});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->server.drift.enabled);
  auto on = ParseConfig(R"({"drift": {"windows": ["90s", "15m", "7d"], "baseline_dir": "drift"}})", "/etc/vlmd", {});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->server.drift.enabled);
  ASSERT_EQ(on->server.drift.windows.size(), 3u);
  EXPECT_EQ(on->server.drift.windows[0].seconds, 90);
  EXPECT_EQ(on->server.drift.windows[1].seconds, 900);
  EXPECT_EQ(on->server.drift.windows[2].seconds, 7 * 86400);
  EXPECT_EQ(on->server.drift.baseline_dir, "/etc/vlmd/drift");
  auto disabled = ParseConfig(R"({"drift": {"enabled": false}})", "/etc/vlmd", {});
  ASSERT_TRUE(disabled.ok());
  EXPECT_FALSE(disabled->server.drift.enabled);
}

TEST(Config, CommandLineModelKeepsItsFilesAndTakesTheServerSection) {
  VlmdConfig defaults;
  ModelSpec m;
  m.text_path = "/m/text.gguf";
  m.mmproj_path = "/m/mmproj.gguf";
  defaults.models.push_back(m);
  auto c = ParseConfig(R"({"server": {"max_batch": 8, "ctx": 2048, "memory_budget_mb": 3072}})", "/etc", defaults);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server.memory_budget_bytes, uint64_t{3072} << 20);
  ASSERT_EQ(c->models.size(), 1u);
  EXPECT_EQ(c->models[0].text_path, "/m/text.gguf");
  EXPECT_EQ(c->models[0].scheduler.max_batch, 8);
  EXPECT_EQ(c->models[0].engine.n_ctx, 2048);
  EXPECT_EQ(c->server.limits.max_tokens_limit, 2048);
  // A models list replaces the command line's model, and its entries do not inherit its files.
  auto d = ParseConfig(R"({"models": [{"name": "a", "model": "a.gguf"}]})", "/etc", defaults);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->models.size(), 1u);
  EXPECT_EQ(d->models[0].text_path, "/etc/a.gguf");
  EXPECT_EQ(d->models[0].mmproj_path, "");
  // Routes may name a command-line model by its file stem (the server's default name).
  auto e = ParseConfig(R"({"routes": [{"name": "r", "split": [{"model": "text", "weight": 1}]}]})", "/etc", defaults);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->models[0].name, "text");
}

TEST(Config, MistakesAreErrorsThatNameTheKey) {
  struct Case {
    const char* doc;
    const char* expect;  // substring of the error
  };
  const Case cases[] = {
      {"not json", "not valid JSON"},
      {"[]", "expected an object"},
      {R"({"sever": {}})", "unknown key 'sever'"},
      {R"({"server": {"port": "80"}})", "server.port: expected a number"},
      {R"({"server": {"max_batch": -1}})", "server.max_batch: must be >= 0"},
      {R"({"server": {"timeout_s": 0}})", "timeout_s: must be 1 to 604800"},
      {R"({"server": {"precision": "turbo"}})", "server.precision: expected \"exact\" or \"fast\""},
      {R"({"models": []})", "models: expected at least one model"},
      {R"({"models": [{"name": "a"}]})", "models[0].model: required"},
      {R"({"models": [{"model": "x.gguf"}]})", "models[0].name: required"},
      {R"({"models": [{"name": "a", "model": "x"}, {"name": "a", "model": "y"}]})", "duplicate model name"},
      {R"({"models": [{"name": "a", "model": "x", "mmproj": 3}]})", "models[0].mmproj: expected a string"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r", "split": [{"model": "b", "weight": 1}]}]})",
       "unknown model 'b'"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r"}]})", "exactly one of"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "a", "split": [{"model": "a", "weight": 1}]}]})",
       "already a model or route"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r", "tiers": {"light": "a", "balanced": "a"}}]})",
       "robust: required"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r", "tiers": {"light": "a", "balanced": "a", "robust": "a"}, "thresholds": [0.8, 0.2]}]})",
       "light_below <= robust_from"},
      {R"({"models": [{"name": "a", "model": "x"}], "default_model": "zz"})", "neither a model nor a route"},
      {R"({"security": {"admin_key": "short"}})", "at least 16"},
      {R"({"security": {"image_allowlist": {"mode": "enforce"}}})", "required unless mode is off"},
      {R"({"security": {"image_allowlist": {"file": "a", "mode": "strict"}}})", "enforce, report or off"},
      {R"({"security": {"word_filter": {"words": ["x"], "action": "drop"}}})", "mask or block"},
      {R"({"security": {"word_filter": {"words": "x"}}})", "array of strings"},
      {R"({"audit": {"path": "a", "max_mb": 0}})", "max_mb: must be 1 to 1073741824"},
      // Rotation renamed keep - 1 files under the audit lock: 20 million took minutes.
      {R"({"audit": {"path": "a", "keep": 20000000}})", "audit.keep: must be 0 to 1000"},
      {R"({"audit": {"path": "a", "refusal_interval_s": -1}})", "refusal_interval_s"},
      {R"({"trust": {"flag_entropy": 2}})", "unknown key 'flag_entropy'"},
      {R"({"server": {"port": 70000}})", "must be <= 65535"},
      {R"({"server": {"max_batch": 9999999999}})", "server.max_batch: out of range"},
      {R"({"server": {"max_batch": 2.5}})", "expected an integer"},
      {R"({"server": {"memory_budget_mb": -1}})", "server.memory_budget_mb: must be 0 to 1073741824"},
      {R"({"server": {"max_image_mpixels": 0}})", "server.max_image_mpixels: must be 0.01 to 1000"},
      {R"({"server": {"decode_budget_mb": -5}})", "server.decode_budget_mb: must be 0 to 1073741824"},
      {R"({"server": {"body_budget_mb": -1}})", "server.body_budget_mb: must be 0 to 1073741824"},
      // Sizes shifted to bytes wrapped (every POST then over a limit of 0 bytes), a thread count
      // aborted the start, a timeout added to the clock put every deadline in the past.
      {R"({"server": {"max_body_mb": 17592186044416}})", "server.max_body_mb: must be 1 to 1048576"},
      {R"({"server": {"image_cache_mb": 17592186044416}})", "server.image_cache_mb: must be 0 to 1073741824"},
      {R"({"server": {"threads": 100000}})", "server.threads: must be 0 to 4096"},
      {R"({"server": {"timeout_s": 10000000000}})", "server.timeout_s: must be 1 to 604800"},
      {R"({"server": {"token_budget": 0}})", "server.token_budget: must be 1 to 16777216"},
      // A second section of one name would replace the first one's guard rails.
      {R"({"security": {"api_keys_file": "k.json"}, "security": {}})", "key \"security\" is given twice"},
      {R"({"server": {"port": 1, "port": 2}})", "key \"port\" is given twice"},
      {R"({"audit": {"fsync": true}})", "audit.path: required"},
      {R"({"server": {"http_threads": 100000}})", "server.http_threads: must be 1 to 4096"},
      {R"({"server": {"max_redactions": 5000}})", "server.max_redactions: must be 0 to 4096"},
      {R"({"server": {"max_redactions": -1}})", "server.max_redactions: must be 0 to 4096"},
      {R"({"server": {"tls_cert": "cert.pem"}})", "server.tls_cert and server.tls_key: give both or neither"},
      {R"({"server": {"keep_alive_s": 0}})", "server.keep_alive_s: must be 1 to 3600"},
      {R"({"server": {"max_connections": 0}})", "server.max_connections: must be 1 to 1048576"},
      {R"({"tracing": {"otlp_endpoint": "collector:4318"}})", "tracing.otlp_endpoint: expected an http(s) URL"},
      {R"({"tracing": {"sample_ratio": 1.5}})", "tracing.sample_ratio: must be in [0, 1]"},
      {R"({"tracing": {"endpoint": "http://x"}})", "unknown key 'endpoint'"},
      {R"({"streams": {"max_frames": 0}})", "streams.max_frames: must be 1 to 16"},
      {R"({"drift": {"window": ["1h"]}})", "drift: unknown key 'window'"},
      {R"({"policies": {"redakt": {}}})", "policies: unknown key 'redakt'"},
      {R"({"policies": {"redact": {}}})", "policies.redact.kinds: required"},
      {R"({"policies": {"redact": {"kinds": ["faces", "cars"]}}})", "policies.redact.kinds: 'cars'"},
      {R"({"policies": {"redact": {"kinds": "faces"}}})", "policies.redact.kinds: expected an array of strings"},
      {R"({"policies": {"redact": {"kinds": ["faces"], "style": "smudge"}}})", "policies.redact.style: 'smudge'"},
      {R"({"policies": {"redact": {"kinds": ["faces"], "face_detector": "cnn"}}})", "policies.redact.face_detector: 'cnn'"},
      {R"({"policies": {"redact": {"kinds": ["faces"], "min_score": "high"}}})", "policies.redact.min_score: expected a number"},
      {R"({"policies": {"redact": {"kinds": ["plates"], "cascade_dir": "/nonexistent"}}})", "install opencv-data"},
      {R"({"policies": {"redact": {"kinds": ["faces"], "colour": 1}}})", "policies.redact: unknown key 'colour'"},
      {R"({"drift": {"windows": []}})", "drift.windows: 1 to 4 windows"},
      {R"({"drift": {"windows": ["1h", "60m"]}})", "'60m' twice"},
      {R"({"drift": {"windows": ["1x"]}})", "'1x': expected a duration"},
      {R"({"drift": {"windows": ["30s"]}})", "'30s': expected a duration from 1m to 30d"},
      {R"({"drift": {"windows": ["-1h"]}})", "'-1h': expected a duration"},
      {R"({"drift": {"windows": ["31d"]}})", "'31d': expected a duration"},
      {R"({"drift": {"windows": [3600]}})", "drift.windows: expected an array of strings"},
      {R"({"drift": {"baseline_requests": 5}})", "drift.baseline_requests: must be 10 to 1000000"},
      {R"({"drift": {"min_requests": 0}})", "drift.min_requests: must be 10 to 1000000"},
      // The default min_requests (200) over a smaller baseline: drift would never be scored.
      {R"({"drift": {"baseline_requests": 100}})", "drift.min_requests: 200 is more than baseline_requests (100)"},
      {R"({"drift": {"threshold": 0}})", "drift.threshold: must be > 0"},
      {R"({"drift": {"enabled": "yes"}})", "drift.enabled: expected true or false"},
      {R"({"drift": {"webhook": {"url": "ftp://x/y"}}})", "drift.webhook.url: expected an http(s) URL"},
      {R"({"drift": {"webhook": {"url": "http://x/y", "retries": 11}}})", "drift.webhook.retries: must be 0 to 10"},
      {R"({"drift": {"webhook": {"url": "http://x/y", "timeout_s": 0}}})", "drift.webhook.timeout_s: must be 1 to 60"},
      {R"({"drift": {"webhook": {"uri": "http://x/y"}}})", "drift.webhook: unknown key 'uri'"},
      {R"({"drift": {"webhook": {"timeout_s": 5}}})", "drift.webhook.url: required"},
      {R"({"streams": {"motion_low": 0.5, "motion_high": 0.1}})", "need 0 <= low < high <= 1"},
      {R"({"streams": {"idle_s": 0}})", "streams.idle_s: must be 1 to 604800"},
      {R"({"streams": {"max_mb": 0}})", "streams.max_mb: must be 1 to 2^30"},
      {R"({"streams": {"max_age_s": 0}})", "streams.max_age_s: must be 1 to 604800"},
      {R"({"server": {"memory_budget_mb": 2000000000}})", "memory_budget_mb: must be 0 to 1073741824"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r", "split": [{"model": "a", "weight": 0}]}]})",
       "the weights must sum to a finite number > 0"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r", "split": [{"model": "a", "weight": 1e308}, {"model": "a", "weight": 1e308}]}]})",
       "the weights must sum to a finite number > 0"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r", "tiers": {"light": "a", "balanced": "a", "robust": "a"}, "weights": {"image": 0, "text": 0}}]})",
       "at least one weight must be > 0"},
      {R"({"models": [{"name": "a", "model": "x"}], "routes": [{"name": "r", "tiers": {"light": "a", "balanced": "a", "robust": "a"}, "weights": {"image": 1e308, "text": 1e308}}]})",
       "their sum finite"},
      // A canary without a weight took no traffic.
      {R"({"models": [{"name": "a", "model": "x"}, {"name": "b", "model": "y"}], "routes": [{"name": "r", "split": [{"model": "a"}, {"model": "b", "weight": 90}]}]})",
       "routes[0].split[0].weight: required"},
  };
  for (const Case& c : cases) {
    auto r = ParseConfig(c.doc, "/etc", {});
    ASSERT_FALSE(r.ok()) << c.doc;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.doc << " -> " << r.status().message();
  }
}

TEST(Config, SealedModelKeysArePerModelOverTheCommandLine) {
  VlmdConfig defaults;
  ModelSpec cli;
  cli.engine.model_key.file = "/run/secrets/cli.key";
  defaults.models.push_back(cli);
  auto c = ParseConfig(R"({"models": [
      {"name": "a", "model": "a.sealed", "key_file": "keys/a.key"},
      {"name": "b", "model": "b.sealed", "key_command": "kms-client get"},
      {"name": "c", "model": "c.gguf"}]})", "/etc/vlmd", defaults);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].engine.model_key.file, "/etc/vlmd/keys/a.key");
  EXPECT_EQ(c->models[0].engine.model_key.command, "");
  EXPECT_EQ(c->models[1].engine.model_key.file, "");  // its own source replaces the command line's
  EXPECT_EQ(c->models[1].engine.model_key.command, "kms-client get");
  EXPECT_EQ(c->models[2].engine.model_key.file, "/run/secrets/cli.key");
  auto both = ParseConfig(R"({"models": [{"name": "a", "model": "x", "key_file": "k", "key_command": "c"}]})",
                          "/etc", {});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("models[0].key_file: give key_file or key_command, not both"),
            std::string::npos) << both.status().message();
  EXPECT_FALSE(ParseConfig(R"({"models": [{"name": "a", "model": "x", "key_file": 7}]})", "/etc", {}).ok());
}

TEST(Config, AdminKeyFileGivesItsFirstLineAndRefusesWhatHoldsNoKey) {
  const std::string dir = ::testing::TempDir() + "/vlmd_admin_key_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/a-directory");
  std::ofstream(dir + "/key") << "admin-key-0123456789abcdef  \nsecond line\n";
  std::ofstream(dir + "/empty") << "";
  std::ofstream(dir + "/blank-first") << "\nadmin-key-0123456789abcdef\n";
  auto c = ParseConfig(R"({"security": {"admin_key_file": "key"}})", dir, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server.guard.admin_key, "admin-key-0123456789abcdef");
  // An empty key would have turned the admin routes off without a word.
  for (const char* file : {"empty", "blank-first"}) {
    auto r = ParseConfig(std::string(R"({"security": {"admin_key_file": ")") + file + "\"}}", dir, {});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << file;
    EXPECT_NE(r.status().message().find("no key on its first line"), std::string::npos) << r.status().message();
  }
  auto d = ParseConfig(R"({"security": {"admin_key_file": "a-directory"}})", dir, {});
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("security.admin_key_file"), std::string::npos) << d.status().message();
  auto m = ParseConfig(R"({"security": {"admin_key_file": "missing"}})", dir, {});
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  // A path that never ends stops at the file's bound instead of taking the memory line by line.
  auto z = ParseConfig(R"({"security": {"admin_key_file": "/dev/zero"}})", dir, {});
  EXPECT_EQ(z.status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(Config, MissingFileIsNotFound) {
  auto r = LoadConfigFile("/nonexistent/vlmd.json", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace vlmd::serve
