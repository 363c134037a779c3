// The repository's copy of the parity fixtures (tests/fixtures, taken from ../shared/fixtures by
// scripts/copy_fixtures.sh) is intact: every file that golden.json (or the tokenizer's
// MANIFEST.json) lists has its recorded sha256, and the copy holds no file that nothing vouches
// for. Where ../shared/fixtures exists beside the checkout (a developer's machine), the copy's
// golden.json must also equal the shared one, so a regenerated fixture cannot go unnoticed.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "core/sha256.h"
#include "fixture_json.h"
#include "test_util.h"

namespace vlmd::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Collects (path relative to the fixture, sha256) from golden.json. Two shapes occur: a map of
// file name -> {"sha256": ...} ("files", "images"), and an object with "<x>_file" beside
// "<x>_sha256" (prompt, embeddings, logits).
void CollectDigests(const json& node, const std::string& key_in_parent,
                    std::map<std::string, std::string>* out) {
  if (node.is_array()) {
    for (const json& item : node) CollectDigests(item, "", out);
    return;
  }
  if (!node.is_object()) return;
  for (const auto& [key, value] : node.items()) {
    if (value.is_string() && key.size() >= 6 && key.ends_with("sha256")) {
      const std::string prefix = key.substr(0, key.size() - 6);  // "" or "prompt_" ...
      const auto file = node.find(prefix + "file");
      if (file != node.end() && file->is_string()) {
        (*out)[file->get<std::string>()] = value.get<std::string>();
      } else if (prefix.empty() && !key_in_parent.empty()) {
        (*out)[key_in_parent] = value.get<std::string>();
      }
    }
    CollectDigests(value, key, out);
  }
}

std::string FileDigest(const std::string& path) {
  return DigestHex(Sha256Of(ReadFileBytes(path)));
}

// Every regular file under the fixture folder, relative to it.
std::set<std::string> FilesUnder(const std::string& dir) {
  std::set<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.insert(fs::relative(e.path(), dir).generic_string());
  }
  return files;
}

void ExpectCopyMatches(const std::string& fixture, const std::string& manifest,
                       const std::map<std::string, std::string>& digests) {
  ASSERT_FALSE(digests.empty()) << fixture << "/" << manifest << " lists no sha256";
  std::set<std::string> unvouched = FilesUnder(FixturePath(fixture));
  unvouched.erase(manifest);
  for (const auto& [rel, want] : digests) {
    const std::string path = FixturePath(fixture + "/" + rel);
    EXPECT_TRUE(fs::is_regular_file(path)) << "missing fixture file " << path;
    EXPECT_EQ(FileDigest(path), want) << path;
    unvouched.erase(rel);
  }
  for (const std::string& rel : unvouched) {
    ADD_FAILURE() << fixture << "/" << rel << " is not listed in " << manifest;
  }
  // The copy is current: where the shared fixtures are beside the checkout, same manifest bytes.
  const std::string shared = SourcePath("../shared/fixtures/" + fixture + "/" + manifest);
  if (fs::is_regular_file(shared)) {
    EXPECT_EQ(FileDigest(shared), FileDigest(FixturePath(fixture + "/" + manifest)))
        << fixture << "/" << manifest << " differs from " << shared
        << ": run scripts/copy_fixtures.sh";
  }
}

class FixtureCopyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureCopyTest, FilesMatchGoldenSha256) {
  const std::string fixture = GetParam();
  std::string error;
  const json golden = ReadFixtureJson(fixture + "/golden.json", &error);
  ASSERT_TRUE(error.empty()) << error;
  std::map<std::string, std::string> digests;
  CollectDigests(golden, "", &digests);
  // Each kind of file the tests read is vouched for (the walker found every shape).
  for (const char* needle : {"text.gguf", "mmproj.gguf", "images/", "prompt.txt", "logits-"}) {
    bool found = false;
    for (const auto& [rel, digest] : digests) found = found || rel.find(needle) != std::string::npos;
    EXPECT_TRUE(found) << fixture << ": no sha256 for any '" << needle << "' file";
  }
  ExpectCopyMatches(fixture, "golden.json", digests);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureCopyTest,
                         ::testing::Values("tiny-llava", "tiny-llava16", "tiny-internvl", "tiny-gemma3", "tiny-smolvlm",
                                           "tiny-qwen2vl",
                                           "tiny-qwen25vl", "tiny-qwen3vl"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

TEST(FixtureCopyTest, TokenizerFilesMatchManifest) {
  std::string error;
  const json manifest = ReadFixtureJson("tokenizer/MANIFEST.json", &error);
  ASSERT_TRUE(error.empty()) << error;
  std::map<std::string, std::string> digests;
  for (const auto& [name, digest] : manifest.at("sha256").items()) digests[name] = digest;
  ExpectCopyMatches("tokenizer", "MANIFEST.json", digests);
}

}  // namespace
}  // namespace vlmd::testing
