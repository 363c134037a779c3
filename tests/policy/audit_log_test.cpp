// Audit log: one valid JSON line per Append, size rotation, concurrent appends stay intact.
#include "serve/policy/audit_log.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace vlmd::serve::policy {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class AuditTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "/vlmd_audit_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/audit.jsonl";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(AuditTest, OneValidJsonLinePerAppend) {
  auto log = AuditLog::Open({.path = path_});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ((*log)->path(), path_);
  ASSERT_TRUE((*log)->Append({{"id", 1}, {"route", "/v1/chat"}, {"status", 200}}).ok());
  // Newlines inside values must not break the one-line-per-record shape.
  ASSERT_TRUE((*log)->Append({{"id", 2}, {"note", "two\nlines"}}).ok());
  ASSERT_TRUE((*log)->Append({{"id", 3}, {"bad_utf8", std::string("\xff\xfe")}}).ok());
  // Visible to a reader before the log object goes away: the bytes are in the kernel.
  const std::string text = ReadAll(path_);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const auto lines = ReadLines(path_);
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < lines.size(); ++i) {
    json j = json::parse(lines[i], nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << lines[i];
    EXPECT_EQ(j["id"], int(i) + 1);
  }
  EXPECT_EQ(json::parse(lines[1])["note"], "two\nlines");
}

TEST_F(AuditTest, FileIsPrivateAndAppendedAcrossOpens) {
  {
    auto log = AuditLog::Open({.path = path_});
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->Append({{"n", 1}}).ok());
  }
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto log = AuditLog::Open({.path = path_, .fsync = true});
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE((*log)->Append({{"n", 2}}).ok());
  EXPECT_EQ(ReadLines(path_).size(), 2u);
}

TEST_F(AuditTest, OpenErrorNamesPath) {
  const std::string bad = dir_ + "/no/such/dir/audit.jsonl";
  auto log = AuditLog::Open({.path = bad});
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find(bad), std::string::npos) << log.status().message();
  EXPECT_EQ(AuditLog::Open({.path = path_, .keep_files = -1}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(AuditTest, RotatesBySizeAndKeepsAtMostKeepFiles) {
  // Every record serializes to the same length: the pad shrinks when i gains a digit.
  auto make_record = [](int i) { return json{{"i", i}, {"pad", std::string(i < 10 ? 80 : 79, 'x')}}; };
  const uint64_t line_bytes = make_record(0).dump().size() + 1;
  ASSERT_EQ(make_record(20).dump().size() + 1, line_bytes);
  const int keep = 3;
  auto log = AuditLog::Open({.path = path_, .max_bytes = 3 * line_bytes, .keep_files = keep});
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 21; ++i) ASSERT_TRUE((*log)->Append(make_record(i)).ok()) << i;
  // 21 lines, 3 per file: the current file holds 18..20, .1 holds 15..17, ... .3 holds 9..11;
  // 0..8 were rotated out.
  EXPECT_TRUE(fs::exists(path_));
  for (int n = 1; n <= keep; ++n) EXPECT_TRUE(fs::exists(path_ + "." + std::to_string(n))) << n;
  EXPECT_FALSE(fs::exists(path_ + "." + std::to_string(keep + 1)));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, keep + 1);
  for (const std::string& p : {path_, path_ + ".1", path_ + ".2", path_ + ".3"}) {
    EXPECT_LE(fs::file_size(p), 3 * line_bytes) << p;
    EXPECT_EQ(ReadLines(p).size(), 3u) << p;
  }
  EXPECT_EQ(json::parse(ReadLines(path_)[0])["i"], 18);
  EXPECT_EQ(json::parse(ReadLines(path_ + ".1")[0])["i"], 15);
  EXPECT_EQ(json::parse(ReadLines(path_ + ".2")[0])["i"], 12);
  EXPECT_EQ(json::parse(ReadLines(path_ + ".3")[0])["i"], 9);
}

TEST_F(AuditTest, OversizedLineGoesWholeIntoFreshFile) {
  auto log = AuditLog::Open({.path = path_, .max_bytes = 32, .keep_files = 1});
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE((*log)->Append({{"a", 1}}).ok());
  ASSERT_TRUE((*log)->Append({{"big", std::string(100, 'y')}}).ok());
  EXPECT_EQ(ReadLines(path_ + ".1").size(), 1u);
  ASSERT_EQ(ReadLines(path_).size(), 1u);
  EXPECT_EQ(json::parse(ReadLines(path_)[0])["big"].get<std::string>().size(), 100u);
}

TEST_F(AuditTest, ConcurrentAppendsGiveIntactLines) {
  auto log = AuditLog::Open({.path = path_, .max_bytes = 0});
  ASSERT_TRUE(log.ok());
  constexpr int kThreads = 8, kPerThread = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        // Long-ish lines (several hundred bytes) make torn writes likely if they could happen.
        json r = {{"t", t}, {"i", i}, {"pad", std::string(300 + (i % 7) * 50, char('a' + t))}};
        ASSERT_TRUE((*log)->Append(r).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto lines = ReadLines(path_);
  ASSERT_EQ(lines.size(), size_t(kThreads * kPerThread));
  std::set<std::pair<int, int>> seen;
  for (const std::string& line : lines) {
    json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line.substr(0, 80);
    const int t = j["t"], i = j["i"];
    EXPECT_EQ(j["pad"], std::string(300 + (i % 7) * 50, char('a' + t)));
    seen.insert({t, i});
  }
  EXPECT_EQ(seen.size(), size_t(kThreads * kPerThread));
}

}  // namespace
}  // namespace vlmd::serve::policy
