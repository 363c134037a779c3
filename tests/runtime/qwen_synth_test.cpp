// The synthetic Qwen VL presets (vlmd-synth; Qwen3-VL with its MoE decoder too) load and run end
// to end through the engine, and an image encoded in work units (one ViT block per call, as the
// scheduler runs it) is bit for bit the image encoded at once; positions continue after an image
// in decode.
#include <gtest/gtest.h>

#include "engine/gguf/gguf_reader.h"
#include "engine/runtime/vlm_engine.h"
#include "engine/synth/model_presets.h"
#include "engine/synth/synthetic_model.h"

namespace vlmd::engine::runtime {
namespace {

// A 100 x 60 PPM with a diagonal gradient (no resize ties: 100x60 -> 112x56 padded).
std::string GradientPpm() {
  std::string ppm = "P6\n100 60\n255\n";
  for (int y = 0; y < 60; ++y) {
    for (int x = 0; x < 100; ++x) {
      ppm += static_cast<char>((x * 2 + y) & 255);
      ppm += static_cast<char>((y * 4) & 255);
      ppm += static_cast<char>((x + 3 * y) & 255);
    }
  }
  return ppm;
}

class QwenSynthTest : public ::testing::TestWithParam<const char*> {};

TEST_P(QwenSynthTest, GeneratesAndEncodesInWorkUnitsAsAtOnce) {
  auto preset = synth::FindPreset(GetParam());
  ASSERT_TRUE(preset.has_value());
  const std::string dir = ::testing::TempDir() + "/vlmd_" + preset->name;
  synth::SynthOptions so;
  ASSERT_TRUE(synth::WriteSyntheticText(*preset, so, dir + "-text.gguf").ok());
  ASSERT_TRUE(synth::WriteSyntheticMmproj(*preset, so, dir + "-mmproj.gguf").ok());
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = 512;
  o.mmproj_path = dir + "-mmproj.gguf";
  auto e = VlmEngine::Load(dir + "-text.gguf", o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();

  const std::string ppm = GradientPpm();
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(ppm.data()), ppm.size());
  auto prepared = (*e)->PrepareImage(bytes, {}, 0, nullptr);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  // The plan from the size alone is what preprocessing produced (2.5-VL: 100x60 -> 112x56;
  // 3-VL, align 32: under its minimum of 8 tokens, scaled up to 128x96).
  const models::ImagePlan plan = (*e)->PlanImage(100, 60, 0);
  EXPECT_EQ(prepared->tiles.width, plan.width);
  EXPECT_EQ(prepared->tiles.height, plan.height);
  EXPECT_EQ(plan.width, preset->vision.patch_size == 14 ? 112 : 128);
  EXPECT_EQ(plan.height, preset->vision.patch_size == 14 ? 56 : 96);
  const int32_t align = 2 * preset->vision.patch_size;
  const int32_t gw = plan.width / align, gh = plan.height / align;
  auto whole = (*e)->EncodePrepared(*prepared, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto enc = (*e)->BeginEncode(*prepared);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ((*enc)->total_units(), preset->vision.n_layers + 1);
  while (!(*enc)->done()) ASSERT_TRUE((*e)->EncodeUnits(enc->get(), 1).ok());
  const EncodedImage units = (*e)->EncodedFrom(*prepared, enc->get());
  EXPECT_EQ(units.embeddings, whole->embeddings);
  EXPECT_EQ(units.layout.grid_cols, gw);
  EXPECT_EQ(units.layout.grid_rows, gh);

  auto rows = (*e)->BuildPrompt("<__media__>Describe.", std::span<const EncodedImage>(&*whole, 1), false);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(rows->n_image_tokens, gw * gh);
  EXPECT_EQ(rows->n_image_tokens, plan.rows);
  // An image of gw x gh tokens advances the position counter by max(gw, gh).
  EXPECT_EQ(rows->position_shift, std::max(gw, gh) - gw * gh);
  auto counted = (*e)->CountPromptRows(
      (*e)->ApplyChatTemplate(std::vector<tokenizer::ChatMessage>{{"user", "<__media__>Describe."}}),
      {}, std::vector<models::ImagePlan>{plan});
  ASSERT_TRUE(counted.ok()) << counted.status().ToString();
  EXPECT_EQ(*counted, static_cast<int64_t>(rows->tokens.size()));
  GenerateParams p;
  p.max_tokens = 6;
  p.ignore_eos = true;
  auto r = (*e)->Generate(*rows, p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tokens.size(), 6u);
}

INSTANTIATE_TEST_SUITE_P(Presets, QwenSynthTest, ::testing::Values("tiny-qwen25vl", "tiny-qwen3vl",
                                                                   "tiny-qwen3vlmoe"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

// The `qwen2` text architecture (InternVL's text, the internvl3-2b preset): q/k/v biases of the
// projections' widths, one RoPE position per row, ChatML; the engine loads it as qwen2 and
// generates.
TEST(QwenSynth, Qwen2TextLoadsWithItsBiasesAndGenerates) {
  auto preset = synth::FindPreset("tiny");
  ASSERT_TRUE(preset.has_value());
  preset->vision.projector = synth::ProjectorKind::kNone;
  preset->text.arch = "qwen2";
  const std::string path = ::testing::TempDir() + "/vlmd_tiny_qwen2-text.gguf";
  ASSERT_TRUE(synth::WriteSyntheticText(*preset, {}, path).ok());
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const gguf::TensorInfo* q_bias = (*file)->FindTensor("blk.1.attn_q.bias");
  ASSERT_NE(q_bias, nullptr);
  EXPECT_EQ(q_bias->n_elements(), preset->text.d_model);
  EXPECT_NE((*file)->FindTensor("blk.0.attn_v.bias"), nullptr);
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = 256;
  auto e = VlmEngine::Load(path, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->model().config().arch, "qwen2");
  EXPECT_FALSE((*e)->model().config().multi_rope());
  GenerateParams p;
  p.max_tokens = 4;
  p.ignore_eos = true;
  auto rows = (*e)->BuildPrompt("Hello there.", {}, /*raw=*/false);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  auto r = (*e)->Generate(*rows, p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tokens.size(), 4u);
}

}  // namespace
}  // namespace vlmd::engine::runtime
