// Model keys: 32 hex digits from a file, the environment or a command; every bad source is an
// error that says which source and what is wrong, without quoting the key text.
#include "core/model_key.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace vlmd {
namespace {

constexpr const char* kHex = "00112233445566778899aabbccddeeff";

class ModelKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = (std::filesystem::temp_directory_path() / ("vlmd-key-" + std::to_string(::getpid()))).string();
    ::unsetenv(kModelKeyEnv);
  }
  void TearDown() override {
    std::filesystem::remove(file_);
    ::unsetenv(kModelKeyEnv);
  }
  void WriteKeyFile(const std::string& text) { std::ofstream(file_) << text; }
  static void ExpectTheKey(const Result<SecretKey>& k) {
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(k->bytes[i], static_cast<uint8_t>(0x11 * i));
  }
  std::string file_;
};

TEST_F(ModelKeyTest, ParsesHexWithSurroundingWhitespaceOnly) {
  ExpectTheKey(ParseHexKey(std::string("  ") + kHex + "\n", "test"));
  ExpectTheKey(ParseHexKey("00112233445566778899AABBCCDDEEFF", "test"));
  EXPECT_FALSE(ParseHexKey("0011", "test").ok());
  EXPECT_FALSE(ParseHexKey(std::string(kHex) + "00", "test").ok());
  auto bad = ParseHexKey("zz112233445566778899aabbccddeeff", "the test key");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("the test key"), std::string::npos);
  EXPECT_EQ(bad.status().message().find("zz11"), std::string::npos);  // never quotes key text
  EXPECT_FALSE(ParseHexKey("0011223344556677 8899aabbccddeef", "test").ok());
}

TEST_F(ModelKeyTest, FromAFile) {
  WriteKeyFile(std::string(kHex) + "\n");
  ExpectTheKey(ResolveModelKey({file_, ""}, "id"));
  WriteKeyFile("not a key");
  auto r = ResolveModelKey({file_, ""}, "id");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(file_), std::string::npos);
  EXPECT_EQ(ResolveModelKey({file_ + ".missing", ""}, "id").status().code(), StatusCode::kNotFound);
  WriteKeyFile(std::string(5000, '0'));
  EXPECT_FALSE(ResolveModelKey({file_, ""}, "id").ok());
}

TEST_F(ModelKeyTest, FromTheEnvironmentWhenNoFileOrCommandIsGiven) {
  auto none = ResolveModelKey({}, "id");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("--model-key-file"), std::string::npos);
  ::setenv(kModelKeyEnv, kHex, 1);
  ExpectTheKey(ResolveModelKey({}, "id"));
  WriteKeyFile("ffffffffffffffffffffffffffffffff");
  auto from_file = ResolveModelKey({file_, ""}, "id");  // a given file wins over the variable
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(from_file->bytes[0], 0xff);
}

TEST_F(ModelKeyTest, FromACommandThatIsToldTheKeyId) {
  // The command prints the key only for the key id it is asked for.
  const std::string cmd = std::string("test \"$VLMD_KEY_ID\" = edge-7 && echo ") + kHex;
  ExpectTheKey(ResolveModelKey({"", cmd}, "edge-7"));
  auto wrong_id = ResolveModelKey({"", cmd}, "other");
  ASSERT_FALSE(wrong_id.ok());
  EXPECT_NE(wrong_id.status().message().find("exit status 1"), std::string::npos) << wrong_id.status().message();
  auto garbage = ResolveModelKey({"", "echo hello"}, "id");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("command's output"), std::string::npos);
  EXPECT_FALSE(ResolveModelKey({"", "head -c 10000 /dev/zero"}, "id").ok());
  EXPECT_FALSE(ResolveModelKey({"", "kill -9 $$"}, "id").ok());
  EXPECT_FALSE(ResolveModelKey({file_, "echo x"}, "id").ok());  // both: ambiguous
}

TEST_F(ModelKeyTest, ACommandThatHangsIsKilledWithItsChildrenAtTheDeadline) {
  for (const char* cmd : {"exec >&-; sleep 20",                // closes stdout, keeps running
                          "(sleep 20) & echo 00112233445566778899aabbccddeeff"}) {  // a child holds stdout
    SCOPED_TRACE(cmd);
    ModelKeySource source{"", cmd, 400};
    const auto t0 = std::chrono::steady_clock::now();
    auto r = ResolveModelKey(source, "id");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
    EXPECT_LT(s, 5.0);
  }
}

TEST_F(ModelKeyTest, TheCommandGetsNeitherTheKeyVariableNorOurFilesNorOurBlockedSignals) {
  ::setenv(kModelKeyEnv, "ffffffffffffffffffffffffffffffff", 1);
  ExpectTheKey(ResolveModelKey({"", std::string("test -z \"$VLMD_MODEL_KEY\" && echo ") + kHex}, "id"));
  const int fd = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC, as Asio's sockets
  ASSERT_GE(fd, 0);
  const std::string probe = "test ! -e /proc/self/fd/" + std::to_string(fd) + " && echo " + kHex;
  ExpectTheKey(ResolveModelKey({"", probe}, "id"));
  ::close(fd);
  // vlmd blocks SIGTERM for its sigwait thread; the command must still die of one.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  auto r = ResolveModelKey({"", std::string("kill -TERM $$; echo ") + kHex}, "id");
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("signal 15"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace vlmd
