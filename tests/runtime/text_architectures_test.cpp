// Text architectures that are another's block under a name of their own: an InternLM2 decoder
// (InternVL2-2B and -8B) is llama's block as llama.cpp builds it, so a llama fixture rewritten as
// internlm2 (its keys under the internlm2 prefix, the same tensors) generates exactly what the
// llama file does; without output.weight it is refused, as llama.cpp refuses it (no tied head).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/runtime/vlm_engine.h"
#include "test_util.h"

namespace vlmd::engine::runtime {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;

// `fixture`'s text.gguf with its architecture renamed to `arch` (general.architecture and every
// "llama." key), `drop` left out of the tensors, in a file of its own; "" when it could not be
// written (the test reports it).
std::string WriteRenamed(const std::string& fixture, const std::string& arch, const std::string& drop) {
  auto src = GgufFile::Open(vlmd::testing::FixturePath(fixture + "/text.gguf"));
  if (!src.ok()) return "";
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key == "general.alignment") continue;
    if (kv.key == "general.architecture") {
      w.SetString(kv.key, arch);
    } else if (kv.key.rfind("llama.", 0) == 0) {
      w.SetValue(arch + std::string(kv.key.substr(5)), kv.value);
    } else {
      w.SetValue(kv.key, kv.value);
    }
  }
  for (const auto& t : (*src)->tensors()) {
    if (t.name == drop) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (!w.AddTensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes)).ok()) return "";
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("vlmd-" + arch + "-" + std::to_string(getpid()) + ".gguf"))
                               .string();
  return w.WriteFile(path).ok() ? path : "";
}

Result<std::unique_ptr<VlmEngine>> LoadText(const std::string& path) {
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = 256;
  return VlmEngine::Load(path, o);
}

// Greedy ids and their logprobs for one prompt.
std::pair<std::vector<int32_t>, std::vector<float>> Generated(VlmEngine& e) {
  auto ids = e.tokenizer().Tokenize("Once upon a time there was a little", true, true);
  EXPECT_TRUE(ids.ok());
  if (!ids.ok()) return {};
  GenerateParams p;
  p.max_tokens = 6;
  p.token_stats = true;
  auto r = e.Generate(*ids, p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  std::vector<float> logprobs;
  for (const TokenStats& t : r->token_stats) logprobs.push_back(t.logprob);
  return {r->tokens, logprobs};
}

TEST(TextArchitectures, InternLm2RunsAsTheLlamaBlock) {
  auto llama = LoadText(vlmd::testing::FixturePath("tiny-llava/text.gguf"));
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  const std::string path = WriteRenamed("tiny-llava", "internlm2", "");
  ASSERT_FALSE(path.empty());
  auto internlm2 = LoadText(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(internlm2.ok()) << internlm2.status().ToString();
  const auto expected = Generated(**llama);
  ASSERT_FALSE(expected.first.empty());
  EXPECT_EQ(Generated(**internlm2), expected);
}

TEST(TextArchitectures, InternLm2WithoutItsHeadIsRefused) {
  const std::string path = WriteRenamed("tiny-llava", "internlm2", "output.weight");
  ASSERT_FALSE(path.empty());
  auto e = LoadText(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("output.weight"), std::string::npos) << e.status().ToString();
}

}  // namespace
}  // namespace vlmd::engine::runtime
