// ReadWholeFile: a regular file's bytes, a pipe's and a /proc file's (whose size says 0) to their
// end; a missing path, a directory and a file over the limit are errors that name the path (a
// directory used to abort the tools: std::ifstream's buffer throws from inside
// istreambuf_iterator).
#include "core/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

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

TEST_F(ReadFileTest, ReadsPipesAndProcFilesToTheirEnd) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  const std::string sent(100000, 'p');  // more than a pipe's buffer: the writer waits for the reader
  std::thread writer([&] { std::ofstream(Path("fifo"), std::ios::binary) << sent; });
  auto fifo = ReadWholeFile(Path("fifo"));
  writer.join();
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  EXPECT_EQ(*fifo, sent);
  auto proc = ReadWholeFile("/proc/self/status");
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  EXPECT_NE(proc->find("Pid:"), std::string::npos) << "a /proc file's size is 0: read to its end";
}

TEST_F(ReadFileTest, MissingDirectoryAndOversizedAreErrorsNamingThePath) {
  auto missing = ReadWholeFile(Path("none"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(Path("none")), std::string::npos);

  auto dir = ReadWholeFile(dir_.string());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos) << dir.status().message();

  std::ofstream(Path("big"), std::ios::binary) << std::string(101, 'x');
  auto big = ReadWholeFile(Path("big"), 100);
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("limit of 100 bytes"), std::string::npos) << big.status().message();
  EXPECT_TRUE(ReadWholeFile(Path("big"), 101).ok());
  auto proc = ReadWholeFile("/proc/self/status", 10);  // size 0, yet over the limit once read
  EXPECT_EQ(proc.status().code(), StatusCode::kInvalidArgument);
  // A path that never ends stops at the limit instead of taking all memory (kDefaultMaxFileBytes
  // when the caller gives none).
  auto endless = ReadWholeFile("/dev/zero", 1 << 20);
  EXPECT_EQ(endless.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vlmd
