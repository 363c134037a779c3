// ReadWholeFile: a regular file's bytes; a missing path, a directory, a FIFO and a file over the
// limit are errors that name the path (a directory used to abort the tools: std::ifstream's
// buffer throws from inside istreambuf_iterator).
#include "core/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace vlmd {
namespace {

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / ("vlmd-read-file-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(ReadFileTest, ReadsEveryByteOfARegularFile) {
  std::string bytes(70000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31 % 256);
  std::ofstream(Path("f.bin"), std::ios::binary) << bytes;
  auto r = ReadWholeFile(Path("f.bin"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, bytes);
  std::ofstream(Path("empty"), std::ios::binary).flush();
  auto e = ReadWholeFile(Path("empty"));
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->empty());
}

TEST_F(ReadFileTest, MissingDirectoryFifoAndOversizedAreErrorsNamingThePath) {
  auto missing = ReadWholeFile(Path("none"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(Path("none")), std::string::npos);

  auto dir = ReadWholeFile(dir_.string());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos) << dir.status().message();

  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  auto fifo = ReadWholeFile(Path("fifo"));  // no writer: must not block
  EXPECT_EQ(fifo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fifo.status().message().find("not a regular file"), std::string::npos);

  std::ofstream(Path("big"), std::ios::binary) << std::string(101, 'x');
  auto big = ReadWholeFile(Path("big"), 100);
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("101 bytes"), std::string::npos) << big.status().message();
  EXPECT_TRUE(ReadWholeFile(Path("big"), 101).ok());
}

}  // namespace
}  // namespace vlmd
