// Text-model configs of the M-RoPE architectures from hostile files: a Qwen VL decoder without
// its rope sections, or with bad ones, or a deepstack count past its layers, is refused naming
// the key; an architecture vlmd does not run is UNIMPLEMENTED naming it.
#include <gtest/gtest.h>

#include <limits>

#include "engine/gguf/gguf_writer.h"
#include "engine/models/text_config.h"
#include "engine/models/text_decoder.h"
#include "test_util.h"

namespace vlmd::engine::models {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;

// `fixture`'s text.gguf metadata with `drop` left out and `edit` applied, plus token_embd.
Result<TextConfig> ConfigOf(const std::string& fixture, const std::string& drop,
                            void (*edit)(GgufWriter&) = nullptr) {
  auto src = GgufFile::Open(vlmd::testing::FixturePath(fixture + "/text.gguf"));
  if (!src.ok()) return src.status();
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key == "general.alignment" || kv.key == drop) continue;
    w.SetValue(kv.key, kv.value);
  }
  if (edit) edit(w);
  const gguf::TensorInfo* t = (*src)->FindTensor("token_embd.weight");
  if (t == nullptr) return NotFoundError("fixture without token_embd.weight");
  std::vector<int64_t> ne(t->ne, t->ne + t->n_dims);
  VLMD_RETURN_IF_ERROR(w.AddTensor(t->name, t->type, ne, std::span<const uint8_t>(t->data, t->nbytes)));
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::FromBytes(w.WriteBytes()));
  return ReadTextConfig(*file);
}

TEST(TextConfigTest, QwenVlConfigsAsTheFixturesSay) {
  auto c2 = ConfigOf("tiny-qwen2vl", "");
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  EXPECT_TRUE(c2->multi_rope());
  EXPECT_FALSE(c2->rope_interleaved);
  EXPECT_EQ(c2->rope_sections, (std::array<int32_t, 4>{4, 6, 6, 0}));
  EXPECT_EQ(c2->n_embd_inp(), c2->d_model);
  auto c3 = ConfigOf("tiny-qwen3vl", "");
  ASSERT_TRUE(c3.ok()) << c3.status().ToString();
  EXPECT_TRUE(c3->rope_interleaved);
  EXPECT_TRUE(c3->qk_norm);
  EXPECT_EQ(c3->n_deepstack, 2);
  EXPECT_EQ(c3->n_embd_inp(), 3 * c3->d_model);
}

// The decoder's per-layer specs: Qwen3-VL normalizes q and k in every layer and adds deepstack
// slices 1..n after its first n layers; SmolLM2 (llama) does neither; both one RoPE set, the
// config's.
TEST(TextConfigTest, DecoderLayerSpecsFollowTheFamily) {
  for (const char* fixture : {"tiny-qwen3vl", "tiny-smolvlm"}) {
    auto file = GgufFile::Open(vlmd::testing::FixturePath(std::string(fixture) + "/text.gguf"));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto m = TextDecoder::Load(std::shared_ptr<const GgufFile>(std::move(*file)));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const TextConfig& c = (*m)->config();
    ASSERT_EQ((*m)->rope_sets().size(), 1u) << fixture;
    EXPECT_EQ((*m)->rope_sets()[0].freq_base, c.rope_theta);
    EXPECT_EQ((*m)->rope_sets()[0].sections, c.rope_sections);
    const bool qwen3 = std::string(fixture) == "tiny-qwen3vl";
    EXPECT_EQ(c.n_deepstack, qwen3 ? 2 : 0);
    for (int32_t l = 0; l < c.n_layers; ++l) {
      const DecoderLayerSpec& spec = (*m)->layer_spec(l);
      EXPECT_EQ(spec.rope, 0);
      EXPECT_EQ(spec.qk_norm, qwen3) << fixture << " layer " << l;
      EXPECT_EQ(spec.deepstack_slice, qwen3 && l < 2 ? l + 1 : 0) << fixture << " layer " << l;
    }
  }
}

TEST(TextConfigTest, HostileQwenVlKeysAreNamed) {
  auto missing = ConfigOf("tiny-qwen2vl", "qwen2vl.rope.dimension_sections");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("qwen2vl.rope.dimension_sections"), std::string::npos)
      << missing.status().ToString();
  auto three = ConfigOf("tiny-qwen2vl", "", [](GgufWriter& w) {
    const int32_t s[] = {4, 6, 6};
    w.SetI32Array("qwen2vl.rope.dimension_sections", s);
  });
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), StatusCode::kInvalidArgument) << three.status().ToString();
  auto too_many = ConfigOf("tiny-qwen2vl", "", [](GgufWriter& w) {
    const int32_t s[] = {40, 6, 6, 0};  // more pairs than the head has
    w.SetI32Array("qwen2vl.rope.dimension_sections", s);
  });
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().ToString().find("dimension_sections"), std::string::npos);
  auto deep = ConfigOf("tiny-qwen3vl", "", [](GgufWriter& w) {
    w.SetU32("qwen3vl.n_deepstack_layers", 99);
  });
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().ToString().find("n_deepstack_layers"), std::string::npos);
  auto arch = ConfigOf("tiny-qwen2vl", "", [](GgufWriter& w) {
    w.SetString("general.architecture", "qwen25omni");
  });
  ASSERT_FALSE(arch.ok());
  EXPECT_EQ(arch.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(arch.status().ToString().find("qwen25omni"), std::string::npos);
}


// RoPE scaling keys as llama.cpp reads them: a factor without a type is linear scaling (the
// default type), the older rope.scale_linear key too, "none" ignores the factor, a factor of 0
// means none; attn_factor is kept; other types and bad values are refused naming the key.
TEST(TextConfigTest, RopeScalingKeysAsLlamaCppReadsThem) {
  auto untyped = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetF32("llama.rope.scaling.factor", 4.0f);
  });
  ASSERT_TRUE(untyped.ok()) << untyped.status().ToString();
  EXPECT_FLOAT_EQ(untyped->rope_freq_scale, 0.25f);
  EXPECT_FLOAT_EQ(untyped->rope_attn_factor, 1.0f);
  auto old_key = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetF32("llama.rope.scale_linear", 2.0f);
  });
  ASSERT_TRUE(old_key.ok()) << old_key.status().ToString();
  EXPECT_FLOAT_EQ(old_key->rope_freq_scale, 0.5f);
  auto none = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetString("llama.rope.scaling.type", "none");
    w.SetF32("llama.rope.scaling.factor", 4.0f);
  });
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FLOAT_EQ(none->rope_freq_scale, 1.0f);
  auto zero = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetString("llama.rope.scaling.type", "linear");
    w.SetF32("llama.rope.scaling.factor", 0.0f);
  });
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_FLOAT_EQ(zero->rope_freq_scale, 1.0f);
  auto mscale = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetF32("llama.rope.scaling.attn_factor", 1.25f);
  });
  ASSERT_TRUE(mscale.ok()) << mscale.status().ToString();
  EXPECT_FLOAT_EQ(mscale->rope_attn_factor, 1.25f);
  {  // ... and the decoder's RoPE set runs with both
    auto src = GgufFile::Open(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"));
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    GgufWriter w;
    for (const auto& kv : (*src)->metadata()) {
      if (kv.key != "general.alignment") w.SetValue(kv.key, kv.value);
    }
    w.SetF32("llama.rope.scaling.factor", 4.0f);
    w.SetF32("llama.rope.scaling.attn_factor", 1.25f);
    for (const gguf::TensorInfo& t : (*src)->tensors()) {
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      ASSERT_TRUE(w.AddTensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes)).ok());
    }
    auto file = GgufFile::FromBytes(w.WriteBytes());
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto m = TextDecoder::Load(std::shared_ptr<const GgufFile>(std::move(*file)));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_FLOAT_EQ((*m)->rope_sets()[0].freq_scale, 0.25f);
    EXPECT_FLOAT_EQ((*m)->rope_sets()[0].attn_factor, 1.25f);
  }

  auto yarn = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetString("llama.rope.scaling.type", "yarn");
  });
  ASSERT_FALSE(yarn.ok());
  EXPECT_EQ(yarn.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(yarn.status().ToString().find("yarn"), std::string::npos);
  auto negative = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetF32("llama.rope.scaling.factor", -2.0f);
  });
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().ToString().find("rope.scaling.factor"), std::string::npos);
  auto bad_mscale = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetF32("llama.rope.scaling.attn_factor", 0.0f);
  });
  ASSERT_FALSE(bad_mscale.ok());
  EXPECT_NE(bad_mscale.status().ToString().find("attn_factor"), std::string::npos);
}

// Hyperparameters that would load and then run wrong: more heads than embedding values without
// a key_length (a head size of 0), and an infinite epsilon (every logit 0).
TEST(TextConfigTest, ZeroHeadSizeAndInfiniteEpsilonAreRefused) {
  auto heads = ConfigOf("tiny-smolvlm", "llama.attention.key_length", [](GgufWriter& w) {
    w.SetU32("llama.attention.head_count", 128);  // n_embd is 64
    w.SetU32("llama.attention.head_count_kv", 128);
  });
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.status().ToString().find("key_length"), std::string::npos)
      << heads.status().ToString();
  auto eps = ConfigOf("tiny-smolvlm", "", [](GgufWriter& w) {
    w.SetF32("llama.attention.layer_norm_rms_epsilon", std::numeric_limits<float>::infinity());
  });
  ASSERT_FALSE(eps.ok());
  EXPECT_NE(eps.status().ToString().find("layer_norm_rms_epsilon"), std::string::npos)
      << eps.status().ToString();
}

// A tensor the decoder does not read means a variant it does not run (here an output-projection
// bias, which llama.cpp's llama architecture applies when a file has it): refused at load naming
// the tensor, as llama.cpp refuses a file with tensors it did not create. The same file without
// it loads.
TEST(TextConfigTest, TensorsTheDecoderDoesNotReadAreRefused) {
  auto src = GgufFile::Open(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"));
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  for (bool extra : {false, true}) {
    GgufWriter w;
    for (const auto& kv : (*src)->metadata()) {
      if (kv.key != "general.alignment") w.SetValue(kv.key, kv.value);
    }
    for (const gguf::TensorInfo& t : (*src)->tensors()) {
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      ASSERT_TRUE(w.AddTensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes)).ok());
    }
    const gguf::TensorInfo* norm = (*src)->FindTensor("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    if (extra) {  // d_model f32 values, the shape of the bias
      const std::vector<int64_t> ne = {norm->ne[0]};
      ASSERT_TRUE(w.AddTensor("blk.0.attn_output.bias", norm->type, ne,
                              std::span<const uint8_t>(norm->data, norm->nbytes))
                      .ok());
    }
    auto file = GgufFile::FromBytes(w.WriteBytes());
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto m = TextDecoder::Load(std::shared_ptr<const GgufFile>(std::move(*file)));
    if (!extra) {
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      continue;
    }
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(m.status().ToString().find("blk.0.attn_output.bias"), std::string::npos)
        << m.status().ToString();
  }
}

}  // namespace
}  // namespace vlmd::engine::models
