// mmproj files as llama.cpp's older and legacy converters write them load and encode exactly as
// the clean ones: fc1 / fc2 named ffn_down / ffn_up (the legacy LLaVA script; Gemma 3, SmolVLM
// and Qwen2-VL files of early 2025), LLaVA's clip.vision.projection_dim as CLIP's own 768 (the
// legacy script), Qwen2-VL's clip.vision.feed_forward_length as its merger's width (the current
// converter). llama.cpp takes these from the tensors; so does vlmd. InternVL, whose files were
// never written swapped, is refused swapped (llama.cpp's swap rule leaves it out too). And a llama
// decoder's rope_freqs.weight is applied.
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

// "v.blk.3.ffn_up.bias" -> "v.blk.3.ffn_down.bias" and back; other names unchanged.
std::string SwapFfnName(std::string_view name) {
  std::string s(name);
  for (const auto& [from, to] : {std::pair{".ffn_up.", ".ffn_down."}, std::pair{".ffn_down.", ".ffn_up."}}) {
    if (const size_t at = s.find(from); at != std::string::npos && s.rfind("v.blk.", 0) == 0) {
      return s.replace(at, std::string_view(from).size(), to);
    }
  }
  return s;
}

// fixture's mmproj rewritten with its FFN names swapped and `key` (when set) = value, in a file
// of its own; "" when the copy could not be made (the test reports it).
std::string WriteVariant(const std::string& fixture, const std::string& key, uint32_t value) {
  auto src = GgufFile::Open(vlmd::testing::FixturePath(fixture + "/mmproj.gguf"));
  if (!src.ok()) return "";
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key != "general.alignment") w.SetValue(kv.key, kv.value);
  }
  if (!key.empty()) w.SetU32(key, value);
  for (const auto& t : (*src)->tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (!w.AddTensor(SwapFfnName(t.name), t.type, ne, std::span<const uint8_t>(t.data, t.nbytes)).ok()) {
      return "";
    }
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("vlmd-variant-" + std::to_string(getpid()) + "-" + fixture + ".gguf"))
                               .string();
  return w.WriteFile(path).ok() ? path : "";
}

Result<std::unique_ptr<VlmEngine>> LoadWith(const std::string& fixture, const std::string& mmproj) {
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = 512;
  o.mmproj_path = mmproj;
  return VlmEngine::Load(vlmd::testing::FixturePath(fixture + "/text.gguf"), o);
}

struct Variant {
  const char* fixture;
  const char* image;
  const char* key;  // a key the converter writes wrong, "" for none
  uint32_t value;
};

TEST(ConverterVariants, SwappedFfnNamesAndWrongWidthKeysEncodeAsTheCleanFile) {
  for (const Variant& v : {Variant{"tiny-llava", "img-64x48.png", "clip.vision.projection_dim", 768},
                           Variant{"tiny-qwen2vl", "img-100x70.png", "clip.vision.feed_forward_length", 48},
                           Variant{"tiny-smolvlm", "img-128x96.png", "", 0},
                           Variant{"tiny-gemma3", "img-96x64.png", "", 0}}) {
    SCOPED_TRACE(v.fixture);
    const std::string path = WriteVariant(v.fixture, v.key, v.value);
    ASSERT_FALSE(path.empty());
    auto clean = LoadWith(v.fixture, vlmd::testing::FixturePath(std::string(v.fixture) + "/mmproj.gguf"));
    auto variant = LoadWith(v.fixture, path);
    std::filesystem::remove(path);
    ASSERT_TRUE(clean.ok()) << clean.status().ToString();
    ASSERT_TRUE(variant.ok()) << variant.status().ToString();
    const auto bytes = vlmd::testing::ReadFileBytes(
        vlmd::testing::FixturePath(std::string(v.fixture) + "/images/" + v.image));
    auto a = (*clean)->EncodeImage(bytes, nullptr);
    auto b = (*variant)->EncodeImage(bytes, nullptr);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_FALSE(a->embeddings.empty());
    EXPECT_EQ(a->embeddings, b->embeddings);
  }
}

TEST(ConverterVariants, InternVlSwappedIsRefused) {
  const std::string path = WriteVariant("tiny-internvl", "", 0);
  ASSERT_FALSE(path.empty());
  auto variant = LoadWith("tiny-internvl", path);
  std::filesystem::remove(path);
  ASSERT_FALSE(variant.ok());
  EXPECT_NE(variant.status().ToString().find("ffn_"), std::string::npos) << variant.status().ToString();
}

// A llama decoder's optional rope_freqs.weight (Llama 3.1-style RoPE scaling) divides every
// layer's RoPE frequencies, as llama.cpp applies it: factors of 1 change nothing, factors of 4
// change the logits (the file's frequencies were ignored).
TEST(ConverterVariants, LlamaRopeFreqsScaleTheRope) {
  auto src = GgufFile::Open(vlmd::testing::FixturePath("tiny-llava/text.gguf"));
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  auto rot = (*src)->Find("llama.rope.dimension_count");
  auto heads = (*src)->GetU32("llama.attention.head_count");
  auto width = (*src)->GetU32("llama.embedding_length");
  ASSERT_TRUE(heads.ok() && width.ok());
  const int64_t n_rot = rot != nullptr ? static_cast<int64_t>(rot->u) : *width / *heads;
  auto logprobs_with = [&](float factor) -> std::vector<float> {
    GgufWriter w;
    for (const auto& kv : (*src)->metadata()) {
      if (kv.key != "general.alignment") w.SetValue(kv.key, kv.value);
    }
    for (const auto& t : (*src)->tensors()) {
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      EXPECT_TRUE(w.AddTensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes)).ok());
    }
    if (factor > 0) {
      std::vector<float> f(static_cast<size_t>(n_rot / 2), factor);
      const int64_t ne[] = {n_rot / 2};
      EXPECT_TRUE(w.AddTensor("rope_freqs.weight", DType::kF32, ne,
                              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f.data()),
                                                       f.size() * sizeof(float)))
                      .ok());
    }
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("vlmd-rope-" + std::to_string(getpid()) + ".gguf"))
                                 .string();
    EXPECT_TRUE(w.WriteFile(path).ok());
    EngineOptions o;
    o.threads = 2;
    auto e = VlmEngine::Load(path, o);
    std::filesystem::remove(path);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) return {};
    auto ids = (*e)->tokenizer().Tokenize("Once upon a time there was a little", true, true);
    EXPECT_TRUE(ids.ok());
    GenerateParams p;
    p.max_tokens = 4;
    p.token_stats = true;
    auto r = (*e)->Generate(*ids, p);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<float> out;
    if (r.ok()) {
      for (const TokenStats& t : r->token_stats) out.push_back(t.logprob);
    }
    return out;
  };
  const std::vector<float> plain = logprobs_with(0), ones = logprobs_with(1), fours = logprobs_with(4);
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(ones, plain);
  EXPECT_NE(fours, plain);
}

}  // namespace
}  // namespace vlmd::engine::runtime
