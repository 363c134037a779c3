// Hostile / malformed mmproj files: a missing tensor, a misshapen tensor, an unknown projector
// and a bad key must give a clear Status naming the problem, never a crash.
#include <gtest/gtest.h>

#include <limits>

#include "engine/gguf/gguf_writer.h"
#include "vision_test_util.h"

namespace vlmd::testing {
namespace {

using engine::gguf::GgufFile;
using engine::gguf::GgufWriter;

// Rebuilds tiny-llava's mmproj: every key (with `key_override` applied) and every tensor except
// `drop`; `reshape` gets shape {64, 64} -> {32, 128} (same bytes, wrong shape); `extra`, when
// set, is a copy of v.blk.0.ln1.weight under that name.
Result<std::unique_ptr<engine::models::VisionEncoder>> LoadModified(
    const std::string& drop, const std::string& reshape,
    void (*key_override)(GgufWriter&) = nullptr,
    const std::string& fixture = "tiny-llava", const std::string& drop_key = "",
    const std::string& extra = "") {
  auto src = GgufFile::Open(FixturePath(fixture + "/mmproj.gguf"));
  if (!src.ok()) return src.status();
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key == "general.alignment" || kv.key == drop_key) continue;
    w.SetValue(kv.key, kv.value);
  }
  if (key_override) key_override(w);
  for (const auto& t : (*src)->tensors()) {
    if (t.name == drop) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.name == reshape) ne = {ne[0] / 2, ne[1] * 2};
    Status s = w.AddTensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes));
    if (!s.ok()) return s;
    if (!extra.empty() && t.name == "v.blk.0.ln1.weight") {
      s = w.AddTensor(extra, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes));
      if (!s.ok()) return s;
    }
  }
  auto file = GgufFile::FromBytes(w.WriteBytes());
  if (!file.ok()) return file.status();
  return engine::models::VisionEncoder::Load(
      std::shared_ptr<const GgufFile>(std::move(*file)));
}

TEST(VisionHostileTest, UnmodifiedCopyLoads) {
  auto enc = LoadModified("", "");
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
}

// A tensor the encoder never reads (a norm of a variant it does not run) is refused naming it,
// for a CLIP tower and for the Qwen ViT; the blocks LLaVA skips past its feature layer (the
// fixture has one) and LLaVA-1.6's unused v.image_newline are not such tensors.
TEST(VisionHostileTest, TensorsTheEncoderDoesNotReadAreRefused) {
  for (const char* fixture : {"tiny-llava", "tiny-qwen3vl"}) {
    auto enc = LoadModified("", "", nullptr, fixture, "", "v.blk.0.ln3.weight");
    ASSERT_FALSE(enc.ok()) << fixture;
    EXPECT_EQ(enc.status().code(), StatusCode::kUnimplemented) << enc.status().ToString();
    EXPECT_NE(enc.status().ToString().find("v.blk.0.ln3.weight"), std::string::npos)
        << enc.status().ToString();
  }
  for (const char* fixture : {"tiny-llava", "tiny-llava16", "tiny-qwen3vl"}) {
    auto enc = LoadModified("", "", nullptr, fixture);
    EXPECT_TRUE(enc.ok()) << fixture << ": " << enc.status().ToString();
  }
}

TEST(VisionHostileTest, MissingTensorIsNotFoundNamingIt) {
  for (const char* name : {"v.blk.0.attn_k.weight", "mm.2.weight", "v.position_embd.weight",
                           "v.patch_embd.weight", "v.blk.0.ln2.weight"}) {
    auto enc = LoadModified(name, "");
    ASSERT_FALSE(enc.ok()) << name;
    EXPECT_EQ(enc.status().code(), StatusCode::kNotFound) << enc.status().ToString();
    EXPECT_NE(enc.status().ToString().find(name), std::string::npos) << enc.status().ToString();
  }
}

TEST(VisionHostileTest, WrongShapeIsInvalidArgumentNamingIt) {
  for (const char* name : {"v.blk.0.attn_q.weight", "mm.0.weight"}) {
    auto enc = LoadModified("", name);
    ASSERT_FALSE(enc.ok()) << name;
    EXPECT_EQ(enc.status().code(), StatusCode::kInvalidArgument) << enc.status().ToString();
    EXPECT_NE(enc.status().ToString().find(name), std::string::npos) << enc.status().ToString();
  }
}

// A projector whose hidden width the file sets to 0 (empty mm.0 / mm.2 tensors, an empty bias):
// refused naming the tensor; the bias's shape check divided by its row length of 0 (SIGFPE).
TEST(VisionHostileTest, EmptyProjectorTensorsAreRefused) {
  auto src = GgufFile::Open(FixturePath("tiny-llava/mmproj.gguf"));
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key != "general.alignment") w.SetValue(kv.key, kv.value);
  }
  for (const auto& t : (*src)->tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    std::span<const uint8_t> data(t.data, t.nbytes);
    if (t.name == "mm.0.weight") ne = {ne[0], 0};
    if (t.name == "mm.0.bias") ne = {0};
    if (t.name == "mm.2.weight") ne = {0, ne[1]};
    if (t.name.starts_with("mm.0.") || t.name == "mm.2.weight") data = {};
    ASSERT_TRUE(w.AddTensor(t.name, t.type, ne, data).ok()) << t.name;
  }
  auto file = GgufFile::FromBytes(w.WriteBytes());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto enc = engine::models::VisionEncoder::Load(std::shared_ptr<const GgufFile>(std::move(*file)));
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), StatusCode::kInvalidArgument) << enc.status().ToString();
  EXPECT_NE(enc.status().ToString().find("empty dimension"), std::string::npos)
      << enc.status().ToString();
}

// The Qwen VL files: every tensor and key that family needs is named when missing or misshapen,
// and an image the encoder cannot take is refused.
TEST(VisionHostileTest, QwenFilesNameWhatIsMissing) {
  struct Drop {
    const char* fixture;
    const char* tensor;
  };
  for (const Drop& d : {Drop{"tiny-qwen2vl", "v.patch_embd.weight.1"}, Drop{"tiny-qwen2vl", "v.post_ln.bias"},
                        Drop{"tiny-qwen25vl", "v.blk.1.ffn_gate.weight"},
                        Drop{"tiny-qwen3vl", "v.position_embd.weight"},
                        Drop{"tiny-qwen3vl", "v.deepstack.1.norm.bias"},
                        Drop{"tiny-qwen3vl", "v.blk.0.attn_qkv.bias"}}) {
    auto enc = LoadModified(d.tensor, "", nullptr, d.fixture);
    ASSERT_FALSE(enc.ok()) << d.fixture << " " << d.tensor;
    EXPECT_EQ(enc.status().code(), StatusCode::kNotFound) << enc.status().ToString();
    EXPECT_NE(enc.status().ToString().find(d.tensor), std::string::npos) << enc.status().ToString();
  }
  auto misshapen = LoadModified("", "mm.0.weight", nullptr, "tiny-qwen3vl");
  ASSERT_FALSE(misshapen.ok());
  EXPECT_NE(misshapen.status().ToString().find("mm.0.weight"), std::string::npos);
  // Qwen2.5-VL without its window pattern: llama.cpp refuses it, and so does vlmd.
  auto no_pattern = LoadModified("", "", nullptr, "tiny-qwen25vl", "clip.vision.n_wa_pattern");
  ASSERT_FALSE(no_pattern.ok());
  EXPECT_NE(no_pattern.status().ToString().find("clip.vision.n_wa_pattern"), std::string::npos)
      << no_pattern.status().ToString();
  auto merge3 = LoadModified("", "", [](GgufWriter& w) {
    w.SetU32("clip.vision.spatial_merge_size", 3);
  }, "tiny-qwen2vl");
  ASSERT_FALSE(merge3.ok());
  EXPECT_EQ(merge3.status().code(), StatusCode::kUnimplemented) << merge3.status().ToString();
  auto silu = LoadModified("", "", [](GgufWriter& w) { w.SetBool("clip.use_silu", true); }, "tiny-llava");
  ASSERT_FALSE(silu.ok());
  EXPECT_EQ(silu.status().code(), StatusCode::kUnimplemented) << silu.status().ToString();

  auto ok = LoadModified("", "", nullptr, "tiny-qwen2vl");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  engine::models::PreprocessedImage odd;
  odd.n_tiles = 1;
  odd.width = 30;  // not a multiple of 28
  odd.height = 28;
  odd.grid_cols = 1;
  odd.grid_rows = 1;
  odd.pixels.assign(3 * 30 * 28, 0.0f);
  engine::models::VisionContext ctx;
  ctx.kernels = &engine::kernels::GetKernelTable(engine::kernels::Isa::kRef);
  std::vector<float> out(static_cast<size_t>((*ok)->n_embd()));
  const Status s = (*ok)->EncodeImage(odd, &ctx, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  odd.pixels.resize(10);  // pixels that do not match the layout
  EXPECT_FALSE((*ok)->BeginEncode(odd).ok());
}

TEST(VisionHostileTest, UnknownProjectorIsUnimplemented) {
  auto enc = LoadModified("", "", [](GgufWriter& w) {
    w.SetString("clip.projector_type", "resampler");
  });
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(enc.status().ToString().find("resampler"), std::string::npos);
}

TEST(VisionHostileTest, BadKeysAreInvalidArgument) {
  auto odd_patch = LoadModified("", "", [](GgufWriter& w) {
    w.SetU32("clip.vision.patch_size", 7);  // 32 is not a multiple of 7
  });
  ASSERT_FALSE(odd_patch.ok());
  EXPECT_EQ(odd_patch.status().code(), StatusCode::kInvalidArgument);
  auto bad_mean = LoadModified("", "", [](GgufWriter& w) {
    const float two[] = {0.5f, 0.5f};
    w.SetF32Array("clip.vision.image_mean", two);
  });
  ASSERT_FALSE(bad_mean.ok());
  EXPECT_NE(bad_mean.status().ToString().find("image_mean"), std::string::npos);
}

// Keys that loaded and then ran wrong or asked for gigabytes per image: an infinite image std
// (embeddings blind to the image), a tile side of 8192 (one tile of 8192^2 pixels per image,
// however small the file), Idefics3's longest edge of 32768 (262,144 tiles) or of 1024 over
// 64-pixel tiles (256 tiles of a small grid), Qwen VL patches of 512 pixels (a 1x1 image padded
// to 2048 x 2048, a thin one to gigapixels), and an InternVL tile range no grid fits (every image
// failed, planned as one tile).
TEST(VisionHostileTest, KeysThatWouldRunWrongOrHugeAreRefused) {
  struct Case {
    const char* fixture;
    const char* key;
    void (*edit)(GgufWriter&);
  };
  const Case cases[] = {
      {"tiny-llava", "image_std",
       [](GgufWriter& w) {
         const float inf[] = {0.5f, std::numeric_limits<float>::infinity(), 0.5f};
         w.SetF32Array("clip.vision.image_std", inf);
       }},
      {"tiny-llava", "image_size", [](GgufWriter& w) { w.SetU32("clip.vision.image_size", 8192); }},
      {"tiny-smolvlm", "preproc_image_size",
       [](GgufWriter& w) { w.SetU32("clip.vision.preproc_image_size", 32768); }},
      {"tiny-smolvlm", "preproc_image_size",
       [](GgufWriter& w) { w.SetU32("clip.vision.preproc_image_size", 1024); }},
      {"tiny-qwen2vl", "patch_size",
       [](GgufWriter& w) {
         w.SetU32("clip.vision.image_size", 1024);
         w.SetU32("clip.vision.patch_size", 512);
       }},
      {"tiny-internvl", "preproc_min_tiles",
       [](GgufWriter& w) {
         w.SetU32("clip.vision.preproc_min_tiles", 3);
         w.SetU32("clip.vision.preproc_max_tiles", 4);
       }},
  };
  for (const Case& c : cases) {
    auto enc = LoadModified("", "", c.edit, c.fixture);
    ASSERT_FALSE(enc.ok()) << c.fixture << " " << c.key;
    EXPECT_EQ(enc.status().code(), StatusCode::kInvalidArgument) << enc.status().ToString();
    EXPECT_NE(enc.status().ToString().find(c.key), std::string::npos) << enc.status().ToString();
  }
}

TEST(VisionHostileTest, EncodeRejectsNoTiles) {
  std::string error;
  auto le = LoadEncoder("tiny-llava", &error);
  ASSERT_NE(le->encoder, nullptr) << error;
  float dummy = 0.0f;
  EXPECT_FALSE(le->encoder->Encode(&dummy, 0, &le->ctx).ok());
  EXPECT_FALSE(le->encoder->Encode(nullptr, 1, &le->ctx, &dummy).ok());
}

}  // namespace
}  // namespace vlmd::testing
