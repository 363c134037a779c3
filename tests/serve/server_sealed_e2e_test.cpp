// Sealed models (vlmd-encrypt) served end to end over real HTTP on 127.0.0.1: a sealed model
// answers as the plain files do, keeps their model_hash (routes, caches and audit lines do not
// change), says in /admin/models that it was decrypted into memory, and hot-swaps both ways; a
// model without a key for sealed files fails its reload with a clear error and keeps serving.
#include <gtest/gtest.h>

#include "core/sealed_file.h"
#include "core/thread_pool.h"
#include "serve/api/requests.h"
#include "server_test_servers.h"

namespace vlmd::serve {
namespace {

using testing::FixtureImage;

constexpr const char* kAdmin = "admin-key-0123456789abcdef";

class ServerSealedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_file_ = dir_.Write("model.key", "8899aabbccddeeff0011223344556677\n");
    auto key = ParseHexKey("8899aabbccddeeff0011223344556677", "test");
    ASSERT_TRUE(key.ok());
    ThreadPool pool(2);
    const ModelSpec plain = FixtureSpec("plain");
    ASSERT_TRUE(SealFile(plain.text_path, dir_.Path("text.sealed"), *key, {"k1"}, &pool).ok());
    ASSERT_TRUE(SealFile(plain.mmproj_path, dir_.Path("mmproj.sealed"), *key, {"k1"}, &pool).ok());
  }
  ModelSpec SealedSpec(const std::string& name) const {
    ModelSpec s = FixtureSpec(name);
    s.text_path = dir_.Path("text.sealed");
    s.mmproj_path = dir_.Path("mmproj.sealed");
    s.engine.model_key.file = key_file_;
    return s;
  }
  static json Ask(httplib::Client& c, const std::string& model) {
    const json req{{"model", model},
                   {"prompt", "What is in the image?"},
                   {"max_tokens", 8},
                   {"image_base64", api::EncodeBase64(FixtureImage("img-128x96.png"))}};
    auto r = c.Post("/v1/vlm/invoke", req.dump(), "application/json");
    if (!r) return json{{"error", "no reply"}};
    return json::parse(r->body, nullptr, false);
  }
  static json AdminModel(httplib::Client& c, const std::string& name) {
    auto r = c.Get("/admin/models", Bearer(kAdmin));
    if (!r) return json::object();
    const json all = json::parse(r->body, nullptr, false);
    if (all.is_object() && all.contains("models")) {
      for (const json& m : all["models"]) {
        if (m["name"] == name) return m;
      }
    }
    ADD_FAILURE() << "no model '" << name << "' in " << r->status << " " << r->body;
    return json::object();
  }

  TempDir dir_;
  std::string key_file_;
};

TEST_F(ServerSealedTest, AnswersAsThePlainFilesWithTheirModelHash) {
  ServerOptions o;
  o.guard.admin_key = kAdmin;
  auto server = StartServer(o, {FixtureSpec("plain"), SealedSpec("sealed")});
  auto c = ClientOf(*server);
  const json plain = Ask(*c, "plain"), sealed = Ask(*c, "sealed");
  ASSERT_TRUE(plain.contains("text")) << plain.dump();
  ASSERT_TRUE(sealed.contains("text")) << sealed.dump();
  EXPECT_EQ(sealed["text"], plain["text"]);
  EXPECT_EQ(sealed["usage"], plain["usage"]);
  EXPECT_EQ(sealed["model_hash"], plain["model_hash"]);
  EXPECT_EQ(sealed["model_hash"].get<std::string>().size(), 64u);
  const json m = AdminModel(*c, "sealed");
  ASSERT_TRUE(m.contains("sealed")) << m.dump();
  EXPECT_EQ(m["sealed"]["decrypted_in_memory"], true) << m.dump();
  EXPECT_TRUE(m["sealed"]["locked"].is_boolean());
  EXPECT_FALSE(AdminModel(*c, "plain").contains("sealed"));
}

TEST_F(ServerSealedTest, HotSwapsBetweenPlainAndSealedFiles) {
  ServerOptions o;
  o.guard.admin_key = kAdmin;
  auto server = StartServer(o, {SealedSpec("m"), FixtureSpec("nokey")});
  auto c = ClientOf(*server);
  const json before = Ask(*c, "m");
  ASSERT_TRUE(before.contains("text")) << before.dump();
  const ModelSpec plain = FixtureSpec("m");
  // To the plain files (no key needed for them) and back to the sealed ones.
  for (const auto& [text, mmproj] : {std::pair{plain.text_path, plain.mmproj_path},
                                     std::pair{dir_.Path("text.sealed"), dir_.Path("mmproj.sealed")}}) {
    const json swap{{"model", text}, {"mmproj", mmproj}};
    auto r = c->Post("/admin/models/m/reload", Bearer(kAdmin), swap.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json after = Ask(*c, "m");
    EXPECT_EQ(after["text"], before["text"]);
    EXPECT_EQ(after["model_hash"], before["model_hash"]);
    EXPECT_EQ(after["version"], before["version"]);  // derived from the same plaintext hash
  }
  // A model configured without a key cannot swap to sealed files; it keeps serving.
  const json swap{{"model", dir_.Path("text.sealed")}, {"mmproj", dir_.Path("mmproj.sealed")}};
  ::unsetenv(kModelKeyEnv);
  auto r = c->Post("/admin/models/nokey/reload", Bearer(kAdmin), swap.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409) << r->body;
  EXPECT_NE(r->body.find("is a sealed model (key id 'k1')"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("no model key"), std::string::npos) << r->body;
  EXPECT_TRUE(Ask(*c, "nokey").contains("text"));
}

}  // namespace
}  // namespace vlmd::serve
