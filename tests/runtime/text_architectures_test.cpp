// Text architectures and tensor layouts that are another's computation under other names, tested
// by rewriting a fixture into them and generating:
// - InternLM2 (InternVL2-2B/8B) is llama's block as llama.cpp builds it: a llama fixture renamed
//   internlm2 generates exactly what the llama file does; without output.weight it is refused,
//   as llama.cpp refuses it (no tied head).
// - A fused attn_qkv (rows [q | k | v], and its bias) loads as the three tensors, for every
//   architecture, as llama.cpp's create_tensor_qkv takes either.
// - Qwen3 (InternVL3.5) is Qwen3-VL's decoder without M-RoPE and deepstack: a Qwen3-VL fixture
//   renamed qwen3 generates for text what the Qwen3-VL file does once its rope sections give every
//   rotary pair the text position (an image-less prompt never reads the deepstack slices).
// - Qwen3 MoE and Qwen3-VL MoE (InternVL3.5-30B-A3B, Qwen3-VL-30B-A3B) with every expert the
//   fixture's dense FFN compute that FFN whatever the router chooses: they generate what the dense
//   architectures do (bit for bit with one expert per row, see the test for two).
// - Phi-3 (InternVL2-4B) is llama's block with NEOX RoPE, q/k/v fused and ffn_up holding
//   [gate | up]: a llama fixture with its q and k rows reordered so that NEOX's rotation pairs are
//   llama's (i, i + n/2 <- 2i, 2i + 1 in each head), fused, renamed phi3, greedily generates the
//   llama file's ids with logprobs within float rounding (the q.k products add the head's values
//   in another order). Its LongRoPE factors are the short ones up to
//   rope.scaling.original_context_length positions per sequence (counted padded to 256, as
//   llama.cpp counts them) and the long ones past it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
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

struct Tensor {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> data;
};
using Tensors = std::vector<Tensor>;

Tensors TensorsOf(const GgufFile& f) {
  Tensors out;
  for (const auto& t : f.tensors()) {
    out.push_back({std::string(t.name), t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                   std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  return out;
}

Tensor* Find(Tensors& ts, const std::string& name) {
  for (Tensor& t : ts) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// Replaces `parts` (same type and shape but the last dimension) by one tensor `name` holding
// them in order along it: a matrix's rows, a vector's values.
void Fuse(Tensors& ts, const std::vector<std::string>& parts, const std::string& name) {
  Tensor fused{name, DType::kF32, {}, {}};
  for (const std::string& part : parts) {
    const Tensor* t = Find(ts, part);
    ASSERT_NE(t, nullptr) << part;
    if (fused.ne.empty()) {
      fused.type = t->type;
      fused.ne = t->ne;
      fused.ne.back() = 0;
    }
    ASSERT_EQ(t->type, fused.type) << part;
    ASSERT_EQ(t->ne.size(), fused.ne.size()) << part;
    ASSERT_TRUE(std::equal(t->ne.begin(), t->ne.end() - 1, fused.ne.begin())) << part;
    fused.ne.back() += t->ne.back();
    fused.data.insert(fused.data.end(), t->data.begin(), t->data.end());
  }
  std::erase_if(ts, [&](const Tensor& t) {
    return std::find(parts.begin(), parts.end(), t.name) != parts.end();
  });
  ts.push_back(std::move(fused));
}

// An f32 [k, heads * hd] projection's rows reordered in each head so that NEOX RoPE (pairs
// (i, i + n_rot / 2)) rotates what llama's RoPE (pairs (2i, 2i + 1)) rotated, at the same
// frequency: new row i = old row 2i, new row n_rot / 2 + i = old row 2i + 1.
void ReorderForNeox(Tensor* t, int64_t hd, int64_t n_rot) {
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, DType::kF32);
  const size_t row = static_cast<size_t>(t->ne[0]) * sizeof(float);
  const std::vector<uint8_t> old = t->data;
  for (int64_t head = 0; head < t->ne[1] / hd; ++head) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      for (const auto& [to, from] : {std::pair{i, 2 * i}, std::pair{n_rot / 2 + i, 2 * i + 1}}) {
        std::memcpy(t->data.data() + (head * hd + to) * row, old.data() + (head * hd + from) * row, row);
      }
    }
  }
}

void AddF32(Tensors& ts, const std::string& name, const std::vector<float>& v) {
  Tensor t{name, DType::kF32, {static_cast<int64_t>(v.size())}, {}};
  t.data.resize(v.size() * sizeof(float));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  ts.push_back(std::move(t));
}

// `fixture`'s text.gguf as architecture `arch` (general.architecture and the keys under its own
// architecture's prefix renamed; `drop`: keys, after the renaming, left out), `edit` applied to
// its tensors, `extra` to its metadata, in a file of its own; "" when it could not be written
// (the test reports it).
std::string WriteVariant(const std::string& fixture, const std::string& arch,
                         const std::function<void(Tensors&)>& edit,
                         const std::function<void(GgufWriter&)>& extra = nullptr,
                         const std::vector<std::string>& drop = {}) {
  auto src = GgufFile::Open(vlmd::testing::FixturePath(fixture + "/text.gguf"));
  if (!src.ok()) return "";
  auto from = (*src)->GetString("general.architecture");
  if (!from.ok()) return "";
  const std::string prefix = std::string(*from) + ".";
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key == "general.alignment") continue;
    std::string key(kv.key);
    if (key.rfind(prefix, 0) == 0) key = arch + "." + key.substr(prefix.size());
    if (std::find(drop.begin(), drop.end(), key) != drop.end()) continue;
    if (key == "general.architecture") {
      w.SetString(key, arch);
    } else {
      w.SetValue(key, kv.value);
    }
  }
  if (extra) extra(w);
  Tensors ts = TensorsOf(**src);
  if (edit) edit(ts);
  for (const Tensor& t : ts) {
    if (!w.AddTensor(t.name, t.type, t.ne, std::span<const uint8_t>(t.data)).ok()) return "";
  }
  static int serial = 0;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("vlmd-" + arch + "-" + std::to_string(getpid()) + "-" +
                             std::to_string(serial++) + ".gguf"))
                               .string();
  return w.WriteFile(path).ok() ? path : "";
}

Result<std::unique_ptr<VlmEngine>> LoadText(const std::string& path, int32_t n_ctx = 256,
                                            ops::Precision precision = ops::Precision::kExact) {
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = n_ctx;
  o.precision = precision;
  return VlmEngine::Load(path, o);
}

// Loads `path` (then removes it) and returns its greedy ids and their logprobs for one prompt;
// empty when it did not load (reported).
std::pair<std::vector<int32_t>, std::vector<float>> Generated(
    const std::string& path, int32_t n_ctx = 256, bool remove = true,
    ops::Precision precision = ops::Precision::kExact) {
  auto e = LoadText(path, n_ctx, precision);
  if (remove) std::filesystem::remove(path);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return {};
  auto ids = (*e)->tokenizer().Tokenize("Once upon a time there was a little", true, true);
  EXPECT_TRUE(ids.ok());
  if (!ids.ok()) return {};
  GenerateParams p;
  p.max_tokens = 6;
  p.token_stats = true;
  auto r = (*e)->Generate(*ids, p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  std::vector<float> logprobs;
  for (const TokenStats& t : r->token_stats) logprobs.push_back(t.logprob);
  return {r->tokens, logprobs};
}

std::pair<std::vector<int32_t>, std::vector<float>> LlamaFixture() {
  return Generated(vlmd::testing::FixturePath("tiny-llava/text.gguf"), 256, false);
}

TEST(TextArchitectures, InternLm2RunsAsTheLlamaBlock) {
  const auto expected = LlamaFixture();
  ASSERT_FALSE(expected.first.empty());
  const std::string path = WriteVariant("tiny-llava", "internlm2", nullptr);
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(Generated(path), expected);
}

TEST(TextArchitectures, InternLm2WithoutItsHeadIsRefused) {
  const std::string path = WriteVariant("tiny-llava", "internlm2", [](Tensors& ts) {
    std::erase_if(ts, [](const Tensor& t) { return t.name == "output.weight"; });
  });
  ASSERT_FALSE(path.empty());
  auto e = LoadText(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("output.weight"), std::string::npos) << e.status().ToString();
}

TEST(TextArchitectures, FusedQkvLoadsAsTheThreeTensors) {
  // llama without biases; qwen2 (InternVL's decoder) with q/k/v biases, fused as attn_qkv.bias.
  for (const char* fixture : {"tiny-llava", "tiny-internvl"}) {
    SCOPED_TRACE(fixture);
    auto src = GgufFile::Open(vlmd::testing::FixturePath(std::string(fixture) + "/text.gguf"));
    ASSERT_TRUE(src.ok());
    auto arch = (*src)->GetString("general.architecture");
    ASSERT_TRUE(arch.ok());
    const auto expected = Generated(vlmd::testing::FixturePath(std::string(fixture) + "/text.gguf"), 256, false);
    ASSERT_FALSE(expected.first.empty());
    bool had_bias = false;
    const std::string path = WriteVariant(fixture, std::string(*arch), [&](Tensors& ts) {
      for (int l = 0; Find(ts, "blk." + std::to_string(l) + ".attn_q.weight") != nullptr; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        Fuse(ts, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, p + "attn_qkv.weight");
        if (Find(ts, p + "attn_q.bias") != nullptr) {
          had_bias = true;
          Fuse(ts, {p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"}, p + "attn_qkv.bias");
        }
      }
    });
    ASSERT_FALSE(path.empty());
    EXPECT_EQ(had_bias, std::string(fixture) == "tiny-internvl");
    EXPECT_EQ(Generated(path), expected);
  }
}

TEST(TextArchitectures, Qwen3RunsAsQwen3VlOnText) {
  // IMRoPE's sections [3, 3, 2, 0] put all 8 rotary pairs of the 16-wide heads in sections 0-2,
  // which a text row's positions fill with its position (the fixture's [4, 2, 2, 0] leaves
  // pair 7 to section 3).
  const std::string qwen3vl = WriteVariant("tiny-qwen3vl", "qwen3vl", nullptr, [](GgufWriter& w) {
    const int32_t s[] = {3, 3, 2, 0};
    w.SetI32Array("qwen3vl.rope.dimension_sections", s);
  });
  ASSERT_FALSE(qwen3vl.empty());
  const auto expected = Generated(qwen3vl);
  ASSERT_FALSE(expected.first.empty());
  const std::string qwen3 = WriteVariant("tiny-qwen3vl", "qwen3", nullptr, nullptr,
                                         {"qwen3.rope.dimension_sections", "qwen3.n_deepstack_layers"});
  ASSERT_FALSE(qwen3.empty());
  EXPECT_EQ(Generated(qwen3), expected);
}

// The llama fixture as phi3; rope_factors of `short_factor` and `long_factor` (none when 0)
// with an original context of 256 positions; rope.scaling.type `scaling` when set.
std::string Phi3Variant(float short_factor, float long_factor, const std::string& scaling = "") {
  return WriteVariant(
      "tiny-llava", "phi3",
      [&](Tensors& ts) {
        constexpr int64_t kHeadDim = 16, kRot = 16;  // tiny-llava: 64 wide, 4 heads, all rotated
        for (int l = 0; Find(ts, "blk." + std::to_string(l) + ".attn_q.weight") != nullptr; ++l) {
          const std::string p = "blk." + std::to_string(l) + ".";
          ReorderForNeox(Find(ts, p + "attn_q.weight"), kHeadDim, kRot);
          ReorderForNeox(Find(ts, p + "attn_k.weight"), kHeadDim, kRot);
          Fuse(ts, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, p + "attn_qkv.weight");
          Fuse(ts, {p + "ffn_gate.weight", p + "ffn_up.weight"}, p + "ffn_up.weight");
        }
        if (short_factor > 0) AddF32(ts, "rope_factors_short.weight", std::vector<float>(kRot / 2, short_factor));
        if (long_factor > 0) AddF32(ts, "rope_factors_long.weight", std::vector<float>(kRot / 2, long_factor));
      },
      [&](GgufWriter& w) {
        w.SetU32("phi3.rope.scaling.original_context_length", 256);
        if (!scaling.empty()) w.SetString("phi3.rope.scaling.type", scaling);
      });
}

TEST(TextArchitectures, Phi3RunsAsTheLlamaBlockWithNeoxRopeAndFusedTensors) {
  const auto expected = LlamaFixture();
  ASSERT_FALSE(expected.first.empty());
  const std::string path = Phi3Variant(0, 0);
  ASSERT_FALSE(path.empty());
  const auto got = Generated(path);
  EXPECT_EQ(got.first, expected.first);
  ASSERT_EQ(got.second.size(), expected.second.size());
  // phi3 scales q by 1 / sqrt(head_dim) before its f16 rounding, as llama.cpp does (the scale
  // is exact in f16 for this fixture's head of 16, so the logprobs cannot show it).
  {
    const std::string scaled = Phi3Variant(0, 0);
    auto e = LoadText(scaled);
    std::filesystem::remove(scaled);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ((*e)->model().config().attn_scale, 0.25f);
  }
  // A change of the order of sums alone moves this fixture's logprobs by up to 1.7e-4 (V's rows
  // and attn_output's inputs reordered alike, measured): the tolerance is that, not a bug's.
  for (size_t i = 0; i < got.second.size(); ++i) {
    EXPECT_NEAR(got.second[i], expected.second[i], 1e-3f) << "token " << i;
  }
}

TEST(TextArchitectures, Phi3TakesItsLongRopeFactorsPastTheOriginalContext) {
  const auto plain = Generated(Phi3Variant(0, 0));
  ASSERT_FALSE(plain.second.empty());
  // Up to 256 positions per sequence the short factors (ones: no change), past them the long
  // ones (fours: other logprobs); like llama.cpp, the context counts padded to 256 (200 -> 256:
  // short, 257 -> 512: long).
  EXPECT_EQ(Generated(Phi3Variant(1, 4), 200), plain);
  EXPECT_EQ(Generated(Phi3Variant(1, 4), 256), plain);
  const auto long_ctx = Generated(Phi3Variant(1, 4), 257);
  ASSERT_EQ(long_ctx.second.size(), plain.second.size());
  EXPECT_NE(long_ctx.second, plain.second);
  // A file that names its scaling LongRoPE (llama.cpp's "longrope") loads as one that does not;
  // another architecture's stays refused.
  EXPECT_EQ(Generated(Phi3Variant(1, 4, "longrope"), 256), plain);
  const std::string llama = WriteVariant("tiny-llava", "llama", nullptr, [](GgufWriter& w) {
    w.SetString("llama.rope.scaling.type", "longrope");
  });
  ASSERT_FALSE(llama.empty());
  auto refused = LoadText(llama);
  std::filesystem::remove(llama);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented) << refused.status().ToString();
}

// The fixture's dense FFN of each layer as `n_expert` equal experts (ffn_{gate,up,down}_exps
// stacking copies) behind a random f32 router (ffn_gate_inp): whichever experts a row chooses,
// their renormalized weights sum to 1, so the layer computes the dense FFN (bit for bit with one
// used per row) and the router's choice is exercised on every row.
void DenseToEqualExperts(Tensors& ts, int64_t n_expert) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int l = 0; Find(ts, "blk." + std::to_string(l) + ".ffn_gate.weight") != nullptr; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    int64_t d = 0;
    for (const char* part : {"gate", "up", "down"}) {
      Tensor* t = Find(ts, p + "ffn_" + part + ".weight");
      ASSERT_NE(t, nullptr);
      ASSERT_EQ(t->ne.size(), 2u);
      if (std::string(part) == "gate") d = t->ne[0];
      Tensor stacked{p + "ffn_" + part + "_exps.weight", t->type, {t->ne[0], t->ne[1], n_expert}, {}};
      for (int64_t e = 0; e < n_expert; ++e) stacked.data.insert(stacked.data.end(), t->data.begin(), t->data.end());
      std::erase_if(ts, [&](const Tensor& x) { return x.name == p + "ffn_" + part + ".weight"; });
      ts.push_back(std::move(stacked));
    }
    std::vector<float> router(static_cast<size_t>(d * n_expert));
    for (float& v : router) v = g(rng);
    Tensor r{p + "ffn_gate_inp.weight", DType::kF32, {d, n_expert}, {}};
    r.data.resize(router.size() * sizeof(float));
    std::memcpy(r.data.data(), router.data(), r.data.size());
    ts.push_back(std::move(r));
  }
}

// The Qwen3-VL fixture as `arch` with `n_expert` equal experts, `n_used` per row, an expert
// width key of `width` (< 0: none), `extra` keys, the keys `drop` left out.
std::string MoeVariant(const std::string& arch, int64_t n_expert, int64_t n_used,
                       const std::vector<std::string>& drop = {}, int64_t width = 256,
                       const std::function<void(GgufWriter&)>& extra = nullptr) {
  return WriteVariant("tiny-qwen3vl", arch, [&](Tensors& ts) { DenseToEqualExperts(ts, n_expert); },
                      [&](GgufWriter& w) {
                        w.SetU32(arch + ".expert_count", static_cast<uint32_t>(n_expert));
                        w.SetU32(arch + ".expert_used_count", static_cast<uint32_t>(n_used));
                        if (width >= 0) {
                          w.SetU32(arch + ".expert_feed_forward_length",
                                   static_cast<uint32_t>(width));
                        }
                        if (extra) extra(w);
                      },
                      drop);
}

// The error loading `path` gives (then removes it); "" when it loaded.
std::string Refusal(const std::string& path) {
  auto e = LoadText(path);
  std::filesystem::remove(path);
  return e.ok() ? "" : e.status().ToString();
}

// In the fast precision a row's products do not depend on the rows beside it (prompt rows on the
// tile route at any count, decode rows on the int8 kernel per row), so one of equal experts per
// row is the dense FFN bit for bit, whichever expert a row chose and however many rows share it.
// Two experts per row add w0 y + w1 y with w0 + w1 = 1 to rounding; this random fixture
// amplifies such last-bit differences to ~1e-3 in the logprobs (as it does the exact precision's
// f16 products of another row count, which is why the dense file is compared in the fast one).
TEST(TextArchitectures, Qwen3VlMoeWithEqualExpertsRunsAsQwen3Vl) {
  constexpr auto kFast = ops::Precision::kFast;
  const auto expected =
      Generated(vlmd::testing::FixturePath("tiny-qwen3vl/text.gguf"), 256, false, kFast);
  ASSERT_FALSE(expected.first.empty());
  const std::string one = MoeVariant("qwen3vlmoe", 4, 1);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(Generated(one, 256, true, kFast), expected);
  // An expert width of 0 falls back to feed_forward_length / expert_used_count (256 / 1 here),
  // as llama.cpp reads it.
  const std::string zero_width = MoeVariant("qwen3vlmoe", 4, 1, {}, 0);
  ASSERT_FALSE(zero_width.empty());
  EXPECT_EQ(Generated(zero_width, 256, true, kFast), expected);
  // feed_forward_length is optional for a MoE (only expert_feed_forward_length is used).
  const std::string no_dense_width = MoeVariant("qwen3vlmoe", 4, 1, {"qwen3vlmoe.feed_forward_length"});
  ASSERT_FALSE(no_dense_width.empty());
  EXPECT_EQ(Generated(no_dense_width, 256, true, kFast), expected);
  const std::string two = MoeVariant("qwen3vlmoe", 4, 2);
  ASSERT_FALSE(two.empty());
  const auto got = Generated(two, 256, true, kFast);
  EXPECT_EQ(got.first, expected.first);
  ASSERT_EQ(got.second.size(), expected.second.size());
  for (size_t i = 0; i < got.second.size(); ++i) EXPECT_NEAR(got.second[i], expected.second[i], 1e-2f) << i;
}

TEST(TextArchitectures, Qwen3MoeWithEqualExpertsRunsAsQwen3) {
  constexpr auto kFast = ops::Precision::kFast;
  const std::vector<std::string> drop = {"qwen3.rope.dimension_sections", "qwen3.n_deepstack_layers"};
  const std::string dense = WriteVariant("tiny-qwen3vl", "qwen3", nullptr, nullptr, drop);
  ASSERT_FALSE(dense.empty());
  const auto expected = Generated(dense, 256, true, kFast);
  ASSERT_FALSE(expected.first.empty());
  const std::string path = MoeVariant("qwen3moe", 8, 1,
                                      {"qwen3moe.rope.dimension_sections", "qwen3moe.n_deepstack_layers"});
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(Generated(path, 256, true, kFast), expected);
}

TEST(TextArchitectures, MoeFilesWithBadExpertCountsAreRefused) {
  for (const auto& [n_expert, n_used] : {std::pair<int64_t, int64_t>{4, 5}, {4, 0}}) {
    const std::string path = MoeVariant("qwen3vlmoe", n_expert, n_used);
    ASSERT_FALSE(path.empty());
    const std::string refused = Refusal(path);
    EXPECT_NE(refused.find("expert_used_count"), std::string::npos) << refused;
  }
  // Expert groups (a group-limited choice vlmd does not implement) are refused by name.
  const std::string grouped = MoeVariant("qwen3vlmoe", 4, 2, {}, 256, [](GgufWriter& w) {
    w.SetU32("qwen3vlmoe.expert_group_count", 2);
  });
  ASSERT_FALSE(grouped.empty());
  const std::string group_refused = Refusal(grouped);
  EXPECT_NE(group_refused.find("expert_group_count"), std::string::npos) << group_refused;
  // Neither width: refused naming the expert width.
  const std::string no_width =
      MoeVariant("qwen3vlmoe", 4, 2, {"qwen3vlmoe.feed_forward_length"}, -1);
  ASSERT_FALSE(no_width.empty());
  const std::string width_refused = Refusal(no_width);
  EXPECT_NE(width_refused.find("expert_feed_forward_length"), std::string::npos) << width_refused;
  // The dense FFN's tensors instead of the experts': the missing one is named.
  const std::string dense = WriteVariant("tiny-qwen3vl", "qwen3vlmoe", nullptr, [](GgufWriter& w) {
    w.SetU32("qwen3vlmoe.expert_count", 4);
    w.SetU32("qwen3vlmoe.expert_used_count", 2);
  });
  ASSERT_FALSE(dense.empty());
  const std::string dense_refused = Refusal(dense);
  EXPECT_NE(dense_refused.find("ffn_gate_inp"), std::string::npos) << dense_refused;
}

}  // namespace
}  // namespace vlmd::engine::runtime
