// Hostile / malformed mmproj files: a missing tensor, a misshapen tensor, an unknown projector
// and a bad key must give a clear Status naming the problem, never a crash.
#include <gtest/gtest.h>

#include "engine/gguf/gguf_writer.h"
#include "vision_test_util.h"

namespace vlmd::testing {
namespace {

using engine::gguf::GgufFile;
using engine::gguf::GgufWriter;

// Rebuilds tiny-llava's mmproj: every key (with `key_override` applied) and every tensor except
// `drop`; `reshape` gets shape {64, 64} -> {32, 128} (same bytes, wrong shape).
Result<std::unique_ptr<engine::models::VisionEncoder>> LoadModified(
    const std::string& drop, const std::string& reshape,
    void (*key_override)(GgufWriter&) = nullptr) {
  auto src = GgufFile::Open(FixturePath("tiny-llava/mmproj.gguf"));
  if (!src.ok()) return src.status();
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key == "general.alignment") continue;
    w.SetValue(kv.key, kv.value);
  }
  if (key_override) key_override(w);
  for (const auto& t : (*src)->tensors()) {
    if (t.name == drop) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.name == reshape) ne = {32, 128};
    Status s = w.AddTensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes));
    if (!s.ok()) return s;
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
