// Sealed files: a round trip gives the plaintext back; a wrong key, a changed byte anywhere, a
// truncated or extended file are each refused with an error that names the problem; the secure
// buffer is anonymous, zeroed, and wipes what it releases.
#include "core/sealed_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "core/secure_memory.h"
#include "core/thread_pool.h"
#include "test_util.h"

namespace vlmd {
namespace {

namespace fs = std::filesystem;

class SealedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vlmd-sealed-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    for (size_t i = 0; i < key_.bytes.size(); ++i) key_.bytes[i] = static_cast<uint8_t>(17 * i + 3);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A file of `n` pseudo-random bytes.
  std::vector<uint8_t> WritePlain(const std::string& path, size_t n) {
    std::vector<uint8_t> bytes(n);
    std::mt19937 rng(static_cast<uint32_t>(n));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), n);
    return bytes;
  }
  static std::vector<uint8_t> Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void Write(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }

  fs::path dir_;
  SecretKey key_;
  SealOptions opts_{"edge-key-7", 4096};  // small chunks: several per test file
};

TEST_F(SealedFileTest, RoundTripGivesThePlaintextBackWithAndWithoutThreads) {
  ThreadPool pool(2);
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{3 * 4096 + 123}}) {
    SCOPED_TRACE(n);
    const auto plain = WritePlain(Path("in"), n);
    ASSERT_TRUE(SealFile(Path("in"), Path("out"), key_, opts_, &pool).ok());
    EXPECT_FALSE(fs::exists(Path("out.partial")));
    EXPECT_TRUE(IsSealedFile(Path("out")));
    EXPECT_FALSE(IsSealedFile(Path("in")));
    const auto sealed = Read(Path("out"));
    if (n >= 64) {  // the ciphertext holds no long run of the plaintext
      EXPECT_EQ(std::search(sealed.begin(), sealed.end(), plain.begin(), plain.begin() + 64), sealed.end());
    }
    auto header = ReadSealedHeader(Path("out"));
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->key_id, "edge-key-7");
    EXPECT_EQ(header->scheme, kSealedScheme);
    EXPECT_EQ(header->plaintext_bytes, n);
    EXPECT_EQ(header->plaintext_sha256, Sha256Of(plain));
    EXPECT_EQ(header->file_bytes, sealed.size());
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      auto back = UnsealFile(Path("out"), key_, p);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(std::vector<uint8_t>(back->bytes().begin(), back->bytes().end()), plain);
    }
  }
}

TEST_F(SealedFileTest, TwoSealsOfOneFileDiffer) {
  WritePlain(Path("in"), 5000);
  ASSERT_TRUE(SealFile(Path("in"), Path("a"), key_, opts_, nullptr).ok());
  ASSERT_TRUE(SealFile(Path("in"), Path("b"), key_, opts_, nullptr).ok());
  EXPECT_NE(Read(Path("a")), Read(Path("b")));  // fresh salt and nonce each time
}

TEST_F(SealedFileTest, WrongKeyIsNamed) {
  WritePlain(Path("in"), 10000);
  ASSERT_TRUE(SealFile(Path("in"), Path("out"), key_, opts_, nullptr).ok());
  SecretKey other = key_;
  other.bytes[5] ^= 1;
  auto r = UnsealFile(Path("out"), other, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("wrong key"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("edge-key-7"), std::string::npos);
}

TEST_F(SealedFileTest, EveryAlteredByteIsDetected) {
  WritePlain(Path("in"), 3 * 4096 + 50);
  ASSERT_TRUE(SealFile(Path("in"), Path("out"), key_, opts_, nullptr).ok());
  const auto good = Read(Path("out"));
  const uint64_t header = ReadSealedHeader(Path("out"))->header_bytes;
  struct Case {
    size_t offset;
    const char* says;
  };
  const Case cases[] = {
      {38, "key id"},                            // inside the key id (now not a valid one)
      {50, "header"},                            // the salt
      {header - 80, "header"},                   // the plaintext SHA-256
      {header - 40, "key check bytes were altered"},  // the key check: read as a wrong key
      {header - 5, "header"},                    // the header MAC
      {header + 10, "chunk 0"},                  // ciphertext of the first chunk
      {header + 2 * 4096 + 7, "chunk 2"},        // a middle chunk
      {good.size() - 1, "chunk 3"},              // the last chunk's tag
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.offset);
    auto bad = good;
    bad[c.offset] ^= 0x40;
    Write(Path("bad"), bad);
    auto r = UnsealFile(Path("bad"), key_, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("altered"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(UnsealFile(Path("out"), key_, nullptr).ok());
}

TEST_F(SealedFileTest, TruncatedAndExtendedFilesAreRefused) {
  WritePlain(Path("in"), 9000);
  ASSERT_TRUE(SealFile(Path("in"), Path("out"), key_, opts_, nullptr).ok());
  const auto good = Read(Path("out"));
  for (size_t keep : {size_t{4}, size_t{30}, size_t{120}, good.size() - 33, good.size() - 1}) {
    SCOPED_TRACE(keep);
    Write(Path("cut"), std::vector<uint8_t>(good.begin(), good.begin() + keep));
    auto r = UnsealFile(Path("cut"), key_, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
    EXPECT_FALSE(ReadSealedHeader(Path("cut")).ok());
  }
  auto longer = good;
  longer.push_back(0);
  Write(Path("long"), longer);
  auto r = UnsealFile(Path("long"), key_, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("after its end"), std::string::npos) << r.status().message();
}

TEST_F(SealedFileTest, PlainFilesAndMissingFilesAreNotSealed) {
  WritePlain(Path("in"), 100);
  auto r = UnsealFile(Path("in"), key_, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a sealed file"), std::string::npos);
  EXPECT_EQ(UnsealFile(Path("missing"), key_, nullptr).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(IsSealedFile(Path("missing")));
  EXPECT_FALSE(SealFile(Path("missing"), Path("out"), key_, opts_, nullptr).ok());
  EXPECT_FALSE(SealFile(Path("in"), Path("out"), key_, {std::string(256, 'k'), 4096}, nullptr).ok());
  EXPECT_FALSE(SealFile(Path("in"), Path("out"), key_, {"k", 100}, nullptr).ok());  // not a multiple of 16
  EXPECT_FALSE(SealFile(Path("in"), Path("out"), key_, {"bad id\n", 4096}, nullptr).ok());
  EXPECT_TRUE(SealFile(Path("in"), Path("out"), key_, {"arn:aws:kms:eu-1:12/key@v+2_x.y", 4096}, nullptr).ok());
  EXPECT_FALSE(SealFile(Path("in"), Path("in"), key_, opts_, nullptr).ok());  // would replace its input
  EXPECT_FALSE(SealFile(Path("in.partial"), Path("in"), key_, opts_, nullptr).ok());
  EXPECT_EQ(Read(Path("in")).size(), 100u);
}

// The fuzzer's seeds (tests/fuzz/corpus/sealed) are valid files under its all-zero key, so that
// its mutations reach the chunk checks; a format change must re-seal them.
TEST(SealedFileCorpus, FuzzSeedsOpenWithTheZeroKey) {
  const std::string dir = vlmd::testing::SourcePath("tests/fuzz/corpus/sealed");
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().string());
    auto plain = UnsealFile(entry.path().string(), SecretKey{}, nullptr);
    EXPECT_TRUE(plain.ok()) << plain.status().ToString();
    ++n;
  }
  EXPECT_GE(n, 2);
}

TEST(SecureBufferTest, ZeroedAnonymousMemoryThatWipesWhatItReleases) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto b = SecureBuffer::Allocate(5 * page + 10);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 5 * page + 10);
  for (size_t i = 0; i < b->size(); ++i) ASSERT_EQ(b->data()[i], 0);
  std::fill(b->data(), b->data() + b->size(), uint8_t{0xAB});
  // [page / 2, 3.5 pages): only the whole pages 1 and 2 are released.
  EXPECT_EQ(b->ReleaseRange(b->data() + page / 2, 3 * page), 2 * page);
  EXPECT_EQ(b->data()[page - 1], 0xAB);
  EXPECT_EQ(b->data()[page], 0);
  EXPECT_EQ(b->data()[3 * page - 1], 0);
  EXPECT_EQ(b->data()[3 * page], 0xAB);
  EXPECT_EQ(b->ReleaseRange(b->data() + b->size() - 2, 8), 0u);  // not inside: nothing
  SecureBuffer moved = std::move(*b);
  EXPECT_EQ(b->data(), nullptr);
  EXPECT_EQ(moved.data()[0], 0xAB);
  auto empty = SecureBuffer::Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
}

// Minor page faults of the calling thread so far: writing a page given back with MADV_DONTNEED
// faults it in again.
long ThreadMinorFaults() {
  rusage usage{};
  ::getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

TEST(SecureBufferTest, ReleasedPagesAreNotWrittenAgain) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  constexpr size_t kPages = 512;
  {  // The same steps once on a small buffer first, so that the counts below hold no first-run
     // faults of their own (qemu-user translating code, a sanitizer's shadow pages).
    auto warm = SecureBuffer::Allocate(8 * page);
    ASSERT_TRUE(warm.ok());
    std::fill(warm->data(), warm->data() + warm->size(), uint8_t{1});
    warm->ReleaseRange(warm->data() + 2 * page, 4 * page);
    warm->ReleaseRange(warm->data() + page, 6 * page);
  }
  std::optional<SecureBuffer> b;
  {
    auto allocated = SecureBuffer::Allocate(kPages * page);
    ASSERT_TRUE(allocated.ok());
    b.emplace(std::move(*allocated));
  }
  std::fill(b->data(), b->data() + b->size(), uint8_t{0xAB});  // every page resident
  EXPECT_EQ(b->ReleaseRange(b->data() + 64 * page, 384 * page), 384 * page);

  // A second release over the first one wipes and counts only its new pages (32 on each side).
  long before = ThreadMinorFaults();
  EXPECT_EQ(b->ReleaseRange(b->data() + 32 * page, 448 * page), 64 * page);
  EXPECT_LT(ThreadMinorFaults() - before, 16) << "the pages released before were written again";
  EXPECT_EQ(b->data()[32 * page - 1], 0xAB);
  EXPECT_EQ(b->data()[480 * page], 0xAB);

  // The final wipe skips the 448 released pages (a write would map each of them again).
  before = ThreadMinorFaults();
  b.reset();
  EXPECT_LT(ThreadMinorFaults() - before, 16) << "the final wipe wrote the released pages";
}

}  // namespace
}  // namespace vlmd
