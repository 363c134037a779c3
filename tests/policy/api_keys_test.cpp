// API key store: matching, validation, and that no error message ever carries key material.
#include "serve/policy/api_keys.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include "core/sha256.h"

namespace vlmd::serve::policy {
namespace {

using nlohmann::json;

const std::string kKeyA = "alpha-secret-0123456789";
const std::string kKeyB = "bravo-secret-9876543210";

std::string HexOf(const std::string& bytes) {
  return DigestHex(Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                     bytes.size())));
}

// Asserts that `status` failed with INVALID_ARGUMENT and that its message leaks no secret.
void ExpectInvalidWithoutKey(const Status& status, const std::string& secret) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_EQ(status.message().find(secret), std::string::npos) << "key leaked: " << status.message();
  // Not even a prefix long enough to matter.
  EXPECT_EQ(status.message().find(secret.substr(0, 8)), std::string::npos) << status.message();
}

TEST(ApiKeyStore, MatchesPlainAndHashedKeys) {
  json doc = {{"keys",
               {{{"id", "team-a"}, {"key", kKeyA}, {"rate_per_s", 5}, {"burst", 10}},
                {{"id", "team-b"}, {"key_sha256", HexOf(kKeyB)}}}}};
  auto store = ApiKeyStore::FromJson(doc);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->size(), 2u);
  const ApiKey* a = (*store)->Authenticate(kKeyA);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->id, "team-a");
  EXPECT_EQ(a->rate_per_s, 5);
  EXPECT_EQ(a->burst, 10);
  const ApiKey* b = (*store)->Authenticate(kKeyB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->id, "team-b");
  EXPECT_EQ(b->rate_per_s, 0);  // unlimited
  EXPECT_EQ(b->burst, 1);
}

TEST(ApiKeyStore, UppercaseDigestAccepted) {
  std::string hex = HexOf(kKeyB);
  for (char& c : hex) c = char(std::toupper(static_cast<unsigned char>(c)));
  auto store = ApiKeyStore::FromJson({{"keys", {{{"id", "b"}, {"key_sha256", hex}}}}});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_NE((*store)->Authenticate(kKeyB), nullptr);
}

TEST(ApiKeyStore, MismatchAndUnknownKeysAreRefused) {
  auto store = ApiKeyStore::FromJson({{"keys", {{{"id", "team-a"}, {"key", kKeyA}}}}});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Authenticate(""), nullptr);
  EXPECT_EQ((*store)->Authenticate(kKeyB), nullptr);
  EXPECT_EQ((*store)->Authenticate(kKeyA.substr(0, kKeyA.size() - 1)), nullptr);
  EXPECT_EQ((*store)->Authenticate(kKeyA + "x"), nullptr);
  EXPECT_EQ((*store)->Authenticate("team-a"), nullptr);  // the id is not a credential
  EXPECT_EQ((*store)->Authenticate(HexOf(kKeyA)), nullptr);  // nor is the digest
}

TEST(ApiKeyStore, BurstDefaultsToRate) {
  auto store = ApiKeyStore::FromJson({{"keys", {{{"id", "a"}, {"key", kKeyA}, {"rate_per_s", 4.5}}}}});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Authenticate(kKeyA)->burst, 4.5);
}

TEST(ApiKeyStore, DuplicateIdRejected) {
  auto store = ApiKeyStore::FromJson(
      {{"keys", {{{"id", "team-a"}, {"key", kKeyA}}, {{"id", "team-a"}, {"key", kKeyB}}}}});
  ASSERT_FALSE(store.ok());
  ExpectInvalidWithoutKey(store.status(), kKeyB);
  EXPECT_NE(store.status().message().find("team-a"), std::string::npos);
  EXPECT_NE(store.status().message().find("duplicate"), std::string::npos);
}

TEST(ApiKeyStore, SharedSecretRejected) {
  auto store = ApiKeyStore::FromJson(
      {{"keys", {{{"id", "a"}, {"key", kKeyA}}, {{"id", "b"}, {"key_sha256", HexOf(kKeyA)}}}}});
  ASSERT_FALSE(store.ok());
  ExpectInvalidWithoutKey(store.status(), kKeyA);
}

TEST(ApiKeyStore, ShortKeyRejectedNamingIdOnly) {
  const std::string short_key = "short-key-123";  // 13 chars
  auto store = ApiKeyStore::FromJson({{"keys", {{{"id", "tiny"}, {"key", short_key}}}}});
  ASSERT_FALSE(store.ok());
  ExpectInvalidWithoutKey(store.status(), short_key);
  EXPECT_NE(store.status().message().find("tiny"), std::string::npos) << store.status().message();
}

TEST(ApiKeyStore, MalformedEntriesRejectedWithoutKey) {
  const json bad_docs[] = {
      json::array(),
      {{"keys", "nope"}},
      {{"keys", {{{"key", kKeyA}}}}},                                          // no id
      {{"keys", {{{"id", ""}, {"key", kKeyA}}}}},                              // empty id
      {{"keys", {{{"id", "a"}}}}},                                             // neither
      {{"keys", {{{"id", "a"}, {"key", kKeyA}, {"key_sha256", HexOf(kKeyA)}}}}},  // both
      {{"keys", {{{"id", "a"}, {"key_sha256", "abc"}}}}},
      {{"keys", {{{"id", "a"}, {"key", kKeyA}, {"rate_per_s", -1}}}}},
      {{"keys", {{{"id", "a"}, {"key", kKeyA}, {"rate_per_s", "5"}}}}},
      {{"keys", {{{"id", "a"}, {"key", kKeyA}, {"burst", 0.5}}}}},
      {{"keys", {{{"id", "a"}, {"key", kKeyA}, {"rate", 5}}}}},               // unknown field
      {{"keys", {{{"id", "a"}, {"key", 1234567890123456789}}}}},
  };
  for (const json& doc : bad_docs) {
    auto store = ApiKeyStore::FromJson(doc);
    ASSERT_FALSE(store.ok()) << doc.dump();
    ExpectInvalidWithoutKey(store.status(), kKeyA);
  }
}

class ApiKeyFileTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "/vlmd_apikeys_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/keys.json";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& text) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << text;
  }
  std::string dir_, path_;
};

TEST_F(ApiKeyFileTest, LoadsFile) {
  Write(R"({"keys": [{"id": "team-a", "key": ")" + kKeyA + R"(", "rate_per_s": 2}]})");
  auto store = ApiKeyStore::LoadFile(path_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_NE((*store)->Authenticate(kKeyA), nullptr);
  EXPECT_EQ((*store)->Authenticate(kKeyA)->id, "team-a");
}

TEST_F(ApiKeyFileTest, BadJsonReportsOffsetNotText) {
  // An unterminated key string: nlohmann's parse_error text quotes it ("last read: '\"alpha-..."),
  // so this fails if the loader ever passes e.what() through.
  Write(R"({"keys": [{"id": "team-a", "key": ")" + kKeyA);
  auto store = ApiKeyStore::LoadFile(path_);
  ASSERT_FALSE(store.ok());
  ExpectInvalidWithoutKey(store.status(), kKeyA);
  EXPECT_NE(store.status().message().find(path_), std::string::npos) << store.status().message();
}

TEST_F(ApiKeyFileTest, BadEntryInFileNamesPathAndId) {
  Write(R"({"keys": [{"id": "team-a", "key": "short-key"}]})");
  auto store = ApiKeyStore::LoadFile(path_);
  ASSERT_FALSE(store.ok());
  ExpectInvalidWithoutKey(store.status(), "short-key");
  EXPECT_NE(store.status().message().find(path_), std::string::npos);
  EXPECT_NE(store.status().message().find("team-a"), std::string::npos);
}

TEST_F(ApiKeyFileTest, MissingFileIsNotFound) {
  auto store = ApiKeyStore::LoadFile(path_ + ".absent");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound);
}

// A directory given as the key file aborted the server at start (std::ifstream's buffer threw).
TEST_F(ApiKeyFileTest, DirectoryIsRefusedWithAnError) {
  auto store = ApiKeyStore::LoadFile(::testing::TempDir());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("is a directory"), std::string::npos) << store.status().message();
}

}  // namespace
}  // namespace vlmd::serve::policy
