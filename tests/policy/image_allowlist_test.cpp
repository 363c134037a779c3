// Image allowlist: file parsing, lookups and reload-on-change (vlmd issue 6).
#include "serve/policy/image_allowlist.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "core/sha256.h"

namespace vlmd::serve::policy {
namespace {

using std::chrono::milliseconds;

std::string MakeTempDir() {
  std::string tmpl = testing::TempDir() + "/vlmd_allowlist_XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string HexOf(const std::string& bytes) {
  return DigestHex(Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                     bytes.size())));
}

std::string Upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

class AllowlistTest : public testing::Test {
 protected:
  void SetUp() override { path_ = MakeTempDir() + "/allow.txt"; }
  void TearDown() override { std::filesystem::remove_all(std::filesystem::path(path_).parent_path()); }
  std::string path_;
  const std::string a_ = HexOf("image-a"), b_ = HexOf("image-b"), c_ = HexOf("image-c");
};

TEST_F(AllowlistTest, LoadsDigestsCommentsAndBlankLines) {
  WriteFile(path_, "# allowed images\n\n" + a_ + "\n" + b_ + "   # the logo\n  \n" + c_ + "#tight\r\n");
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ((*list)->size(), 3u);
  EXPECT_TRUE((*list)->Contains(a_));
  EXPECT_TRUE((*list)->Contains(b_));
  EXPECT_TRUE((*list)->Contains(c_));
  EXPECT_FALSE((*list)->Contains(HexOf("image-d")));
  EXPECT_FALSE((*list)->Contains(""));
  EXPECT_EQ((*list)->path(), path_);
}

TEST_F(AllowlistTest, UppercaseDigestsAreStoredLowercase) {
  WriteFile(path_, Upper(a_) + "\n");
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_TRUE((*list)->Contains(a_));
}

TEST_F(AllowlistTest, BadLineNamesPathAndLine) {
  for (const std::string& bad : std::vector<std::string>{a_.substr(0, 63), a_ + "0", a_ + " label-without-hash",
                                "zz" + a_.substr(2), std::string("not a digest")}) {
    WriteFile(path_, "# header\n" + b_ + "\n" + bad + "\n");
    auto list = ImageAllowlist::Load(path_);
    ASSERT_FALSE(list.ok()) << bad;
    EXPECT_EQ(list.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(list.status().message().find(path_ + ":3"), std::string::npos)
        << list.status().message();
  }
}

TEST_F(AllowlistTest, LastLineNeedsNoNewlineAndADirectoryIsAnError) {
  WriteFile(path_, a_ + "\n" + b_);
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ((*list)->size(), 2u);
  EXPECT_TRUE((*list)->Contains(b_));
  // Named as a directory (it was a "read error").
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  auto d = ImageAllowlist::Load(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find(dir), std::string::npos) << d.status().message();
}

TEST_F(AllowlistTest, MissingFileIsNotFound) {
  auto list = ImageAllowlist::Load(path_ + ".absent");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kNotFound);
}

TEST_F(AllowlistTest, ReloadIfChangedPicksUpRewrite) {
  WriteFile(path_, a_ + "\n");
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE((*list)->ReloadIfChanged(milliseconds(0)).ok());  // unchanged: still the same list
  EXPECT_TRUE((*list)->Contains(a_));
  WriteFile(path_, b_ + "\n" + c_ + "\n");  // different size, so the stamp differs
  ASSERT_TRUE((*list)->ReloadIfChanged(milliseconds(0)).ok());
  EXPECT_FALSE((*list)->Contains(a_));
  EXPECT_TRUE((*list)->Contains(b_));
  EXPECT_TRUE((*list)->Contains(c_));
  EXPECT_EQ((*list)->size(), 2u);
}

// A list replaced by one of the same size whose modification time is set back to the old one
// (what `cp -p` or `rsync -t` of a prepared file does) is still reloaded: the status-change time
// moves whatever the tool keeps.
TEST_F(AllowlistTest, ReloadIfChangedSeesASameSizeRewriteWithItsOldMtime) {
  WriteFile(path_, a_ + "\n");
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok());
  const auto mtime = std::filesystem::last_write_time(path_);
  WriteFile(path_, b_ + "\n");  // one digest line again: the same size
  std::filesystem::last_write_time(path_, mtime);
  ASSERT_TRUE((*list)->ReloadIfChanged(milliseconds(0)).ok());
  EXPECT_FALSE((*list)->Contains(a_));
  EXPECT_TRUE((*list)->Contains(b_));
}

TEST_F(AllowlistTest, ReloadIfChangedRespectsInterval) {
  WriteFile(path_, a_ + "\n");
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok());
  ASSERT_TRUE((*list)->ReloadIfChanged(milliseconds(0)).ok());   // arms the interval
  ASSERT_TRUE((*list)->ReloadIfChanged(milliseconds(60000)).ok());  // checks, arms 60 s
  WriteFile(path_, b_ + "\n" + c_ + "\n");
  ASSERT_TRUE((*list)->ReloadIfChanged(milliseconds(60000)).ok());  // inside the interval: no stat
  EXPECT_TRUE((*list)->Contains(a_));
  ASSERT_TRUE((*list)->Reload().ok());  // unconditional
  EXPECT_FALSE((*list)->Contains(a_));
  EXPECT_TRUE((*list)->Contains(b_));
}

TEST_F(AllowlistTest, BadRewriteKeepsPreviousList) {
  WriteFile(path_, a_ + "\n");
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok());
  WriteFile(path_, b_ + "\ngarbage line\n");
  Status s = (*list)->ReloadIfChanged(milliseconds(0));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(path_ + ":2"), std::string::npos) << s.message();
  EXPECT_TRUE((*list)->Contains(a_));
  EXPECT_FALSE((*list)->Contains(b_));
  EXPECT_EQ((*list)->Reload().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*list)->Contains(a_));
  // Once fixed, the next change is picked up.
  WriteFile(path_, b_ + "\n");
  ASSERT_TRUE((*list)->ReloadIfChanged(milliseconds(0)).ok());
  EXPECT_TRUE((*list)->Contains(b_));
  EXPECT_FALSE((*list)->Contains(a_));
}

TEST_F(AllowlistTest, DeletedFileKeepsPreviousList) {
  WriteFile(path_, a_ + "\n");
  auto list = ImageAllowlist::Load(path_);
  ASSERT_TRUE(list.ok());
  std::filesystem::remove(path_);
  EXPECT_EQ((*list)->ReloadIfChanged(milliseconds(0)).code(), StatusCode::kNotFound);
  EXPECT_TRUE((*list)->Contains(a_));
}

}  // namespace
}  // namespace vlmd::serve::policy
