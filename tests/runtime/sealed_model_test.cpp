// A sealed model (core/sealed_file.h) loads with its key and answers exactly as the plain files,
// in both precisions (the fast one releases the decrypted pages it packed: a read of a released
// page would see zeros and change the answer); its files' hash is the plain files' hash; without
// the key, or with a wrong one, loading fails naming the file and the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/sealed_file.h"
#include "engine/runtime/vlm_engine.h"
#include "test_util.h"

namespace vlmd::engine::runtime {
namespace {

namespace fs = std::filesystem;
using vlmd::testing::FixturePath;

constexpr const char* kKeyHex = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

class SealedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vlmd-sealed-model-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(Path("model.key")) << kKeyHex << "\n";
    auto key = ParseHexKey(kKeyHex, "test");
    ASSERT_TRUE(key.ok());
    ThreadPool pool(2);
    for (const char* f : {"text.gguf", "mmproj.gguf"}) {
      ASSERT_TRUE(SealFile(FixturePath(std::string("tiny-smolvlm/") + f), Path(f), *key, {"fixture-key"}, &pool).ok());
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  struct Answer {
    std::vector<float> image_rows;
    std::vector<int32_t> tokens;
    std::string hash;
    uint64_t released = 0;  // decoder pages released after packing
  };
  static Result<Answer> Run(const std::string& text, EngineOptions o) {
    o.threads = 2;
    o.n_ctx = 512;
    o.hash_files = true;
    VLMD_ASSIGN_OR_RETURN(std::unique_ptr<VlmEngine> e, VlmEngine::Load(text, o));
    const auto bytes = vlmd::testing::ReadFileBytes(FixturePath("tiny-smolvlm/images/img-128x96.png"));
    VLMD_ASSIGN_OR_RETURN(EncodedImage img, e->EncodeImage(bytes, nullptr));
    std::vector<EncodedImage> images{img};
    VLMD_ASSIGN_OR_RETURN(PromptRows rows,
                          e->BuildPrompt("<|im_start|>User: <__media__>What is it?<end_of_utterance>\nAssistant:", images, true));
    GenerateParams p;
    p.max_tokens = 8;
    VLMD_ASSIGN_OR_RETURN(GenerateResult r, e->Generate(rows, p));
    return Answer{img.embeddings, r.tokens, e->files_sha256(), e->model().released_bytes()};
  }
  fs::path dir_;
};

TEST_F(SealedModelTest, AnswersAsThePlainFilesInBothPrecisions) {
  for (ops::Precision precision : {ops::Precision::kExact, ops::Precision::kFast}) {
    SCOPED_TRACE(static_cast<int>(precision));
    EngineOptions plain;
    plain.precision = precision;
    plain.mmproj_path = FixturePath("tiny-smolvlm/mmproj.gguf");
    auto want = Run(FixturePath("tiny-smolvlm/text.gguf"), plain);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EngineOptions sealed = plain;
    sealed.mmproj_path = Path("mmproj.gguf");
    sealed.model_key.file = Path("model.key");
    auto got = Run(Path("text.gguf"), sealed);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->image_rows, want->image_rows);
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_EQ(got->hash, want->hash);
    EXPECT_EQ(got->hash.size(), 64u);
    // The fast precision packs the F16 matrices and releases their (here: decrypted) pages, so
    // this case checks that nothing reads a released page.
    if (precision == ops::Precision::kFast) {
      EXPECT_GT(got->released, uint64_t{64} << 10);
    }
  }
}

// The server's memory cap on a load (EngineOptions::max_packed_bytes) counts a sealed model's
// decrypted files beside the packed copies, less the pages the loaders give back as they pack:
// the plain files' pages are the kernel's page cache, the decrypted ones the process's memory.
TEST_F(SealedModelTest, TheLoadCapCountsTheDecryptedFilesLessWhatTheLoadersGaveBack) {
  EngineOptions o;
  o.threads = 1;
  o.precision = ops::Precision::kFast;
  o.mmproj_path = Path("mmproj.gguf");
  o.model_key.file = Path("model.key");
  auto unlimited = VlmEngine::Load(Path("text.gguf"), o);
  ASSERT_TRUE(unlimited.ok()) << unlimited.status().ToString();
  const uint64_t packed = (*unlimited)->model().packing().bytes + (*unlimited)->vision()->packing().bytes;
  const uint64_t plaintext = fs::file_size(FixturePath("tiny-smolvlm/text.gguf")) +
                             fs::file_size(FixturePath("tiny-smolvlm/mmproj.gguf"));
  ASSERT_GT(packed, 0u);
  ASSERT_LT(packed, plaintext);
  unlimited->reset();
  // The decrypted files alone pass the cap: refused before any is decrypted. The plain files
  // load under it (only their packed copies count).
  o.max_packed_bytes = plaintext - 1;
  auto refused = VlmEngine::Load(Path("text.gguf"), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("decrypted model files"), std::string::npos) << refused.status().message();
  // ... from the sealed headers, before a key is asked for or anything is decrypted.
  EngineOptions no_key = o;
  no_key.model_key = {};
  EXPECT_EQ(VlmEngine::Load(Path("text.gguf"), no_key).status().code(), StatusCode::kResourceExhausted);
  EngineOptions plain = o;
  plain.mmproj_path = FixturePath("tiny-smolvlm/mmproj.gguf");
  plain.model_key = {};
  EXPECT_TRUE(VlmEngine::Load(FixturePath("tiny-smolvlm/text.gguf"), plain).ok());
  // One byte short of the decrypted files plus every packed copy: it loads, because the rows
  // packed so far were given back before the last matrices were charged.
  o.max_packed_bytes = plaintext + packed - 1;
  auto loaded = VlmEngine::Load(Path("text.gguf"), o);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_GT((*loaded)->model().released_bytes(), 0u);
}

TEST_F(SealedModelTest, MixedPlainAndSealedFilesHashAsThePlainOnes) {
  EngineOptions o;
  o.hash_files = true;
  o.threads = 1;
  o.mmproj_path = FixturePath("tiny-smolvlm/mmproj.gguf");
  o.model_key.file = Path("model.key");
  auto mixed = VlmEngine::Load(Path("text.gguf"), o);
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_TRUE((*mixed)->decrypted());
  o.model_key = {};
  auto plain = VlmEngine::Load(FixturePath("tiny-smolvlm/text.gguf"), o);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->decrypted());
  EXPECT_EQ((*mixed)->files_sha256(), (*plain)->files_sha256());
}

TEST_F(SealedModelTest, NoKeyOrAWrongKeyIsAClearError) {
  ::unsetenv(kModelKeyEnv);
  EngineOptions o;
  o.threads = 1;
  auto none = VlmEngine::Load(Path("text.gguf"), o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("is a sealed model (key id 'fixture-key')"), std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("--model-key-file"), std::string::npos);
  std::ofstream(Path("wrong.key")) << "00000000000000000000000000000000";
  o.model_key.file = Path("wrong.key");
  auto wrong = VlmEngine::Load(Path("text.gguf"), o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("wrong key"), std::string::npos) << wrong.status().message();
}

}  // namespace
}  // namespace vlmd::engine::runtime
