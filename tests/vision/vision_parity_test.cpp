// Vision encoder + projector parity with llama.cpp: every image chunk of every fixture case,
// from the fixture PNG through vlmd's preprocessing, within NMSE 1e-5 of the golden embeddings
// (fixtures/README.md "Tolerances"; llama.cpp's own spread is <= 3.7e-7). Also the chunk
// structure (tiles, tokens per tile) and statelessness across image sizes.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/models/preprocess_vision.h"
#include "engine/ops/activation.h"
#include "engine/synth/model_presets.h"
#include "engine/synth/synthetic_model.h"
#include "engine/tensor/fp16.h"
#include "fixture_json.h"
#include "vision_test_util.h"

namespace vlmd::testing {
namespace {

using engine::models::PreprocessedImage;
using engine::models::PreprocessImage;
using engine::models::View;

struct ImageCase {
  std::string name;
  std::string image;                    // path relative to the fixture
  std::vector<std::string> embd_files;  // image chunks in prompt order
  std::vector<int64_t> n_tokens;
};

// The one-image cases of `fixture`'s golden.json; empty (and ADD_FAILURE naming the file) when it
// cannot be read.
std::vector<ImageCase> ImageCases(const std::string& fixture) {
  std::string error;
  const nlohmann::json j = vlmd::testing::ReadFixtureJson(fixture + "/golden.json", &error);
  std::vector<ImageCase> cases;
  if (!error.empty()) {
    ADD_FAILURE() << error;
    return cases;
  }
  for (const auto& c : j["cases"]) {
    if (c["images"].size() != 1) continue;
    ImageCase ic;
    ic.name = c["name"];
    ic.image = c["images"][0];
    for (const auto& ch : c["chunks"]) {
      if (ch["type"] != "image") continue;
      ic.embd_files.push_back(ch["embd_file"]);
      ic.n_tokens.push_back(ch["n_tokens"]);
    }
    cases.push_back(ic);
  }
  return cases;
}

// Compares every image chunk of every case of `fixture`, the idefics3 global image (the last
// chunk of each image) included.
void CheckFixture(const std::string& fixture) {
  std::string error;
  auto le = LoadEncoder(fixture, &error);
  ASSERT_NE(le->encoder, nullptr) << error;
  const auto& enc = *le->encoder;
  const auto cases = ImageCases(fixture);
  ASSERT_FALSE(cases.empty());
  for (const ImageCase& ic : cases) {
    SCOPED_TRACE(fixture + "/" + ic.name);
    const auto img = ReadPngRgb(FixturePath(fixture + "/" + ic.image));
    ASSERT_GT(img.width, 0) << "cannot decode " << ic.image;
    auto pre = PreprocessImage(enc.config(), View(img));
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    ASSERT_EQ(pre->n_tiles, static_cast<int64_t>(ic.embd_files.size()));
    auto out = enc.Encode(pre->pixels.data(), pre->n_tiles, &le->ctx);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const int64_t per_tile = enc.tokens_per_tile() * enc.n_embd();
    for (size_t k = 0; k < ic.embd_files.size(); ++k) {
      EXPECT_EQ(enc.tokens_per_tile(), ic.n_tokens[k]);
      const auto ref = ReadF32File(FixturePath(fixture + "/" + ic.embd_files[k]));
      ASSERT_EQ(static_cast<int64_t>(ref.size()), per_tile) << ic.embd_files[k];
      const std::span<const float> got(out->data() + k * per_tile, per_tile);
      const double nmse = Nmse(got, ref);
      const bool global = pre->has_global && k + 1 == ic.embd_files.size();
      std::printf("[ parity ] %s/%s chunk %zu%s: NMSE %.3g\n", fixture.c_str(), ic.name.c_str(),
                  k, global ? " (global image)" : "", nmse);
      EXPECT_LE(nmse, 1e-5) << ic.embd_files[k];
    }
  }
}

class VisionParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VisionParityTest, EveryImageChunkMatchesLlamaCpp) { CheckFixture(GetParam()); }

// Normalized pixels ~ N(0, 1), seeded.
std::vector<float> RandomPixels(size_t n) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A SigLIP-like shape larger than the fixtures' (the demo preset: 224 px, patch 16 = 196
// positions, head_dim 64): the encoder's row-sized batches (5 tiles of 196 rows) and the fused
// attention's partial blocks (196 = 6 x 32 + 4 queries, 128 + 68 keys) are exercised. Encoding
// 7 tiles at once equals encoding them one by one, bit for bit, in both precisions; fast stays
// within NMSE 1e-3 of exact.
void CheckBatching(engine::DType vision_type, bool odd_shape = false) {
  SCOPED_TRACE(std::string(engine::DTypeName(vision_type)) + (odd_shape ? " odd shape" : ""));
  auto preset = engine::synth::FindPreset("demo");
  ASSERT_TRUE(preset.has_value());
  if (odd_shape) {
    // head_dim 48 (queries copied into whole tile steps) and d_ff 744 (the FFN's down
    // projection padded to k = 768), as SigLIP-so400m's head_dim 72 and d_ff 4304 need.
    preset->vision.n_heads = 4;
    preset->vision.d_ff = 744;
  }
  const std::string path = ::testing::TempDir() + "/vlmd_vision_batching_mmproj.gguf";
  engine::synth::SynthOptions synth;
  synth.vision_type = vision_type;
  ASSERT_TRUE(engine::synth::WriteSyntheticMmproj(*preset, synth, path).ok());
  const int64_t n_tiles = 7, tile = 3 * 224 * 224;
  const std::vector<float> pixels = RandomPixels(static_cast<size_t>(n_tiles * tile));
  std::vector<std::vector<float>> batched;
  for (auto precision : {engine::ops::Precision::kExact, engine::ops::Precision::kFast}) {
    SCOPED_TRACE(std::string(engine::ops::PrecisionName(precision)));
    std::string error;
    auto le = LoadEncoderFile(path, &error, precision);
    ASSERT_NE(le->encoder, nullptr) << error;
    if (precision == engine::ops::Precision::kFast &&
        le->ctx.kernels->tile_bf16_matmul != nullptr) {
      EXPECT_TRUE(le->encoder->vit()->UsesTileBlocks(*le->ctx.kernels))
          << "fast precision on AMX must run the blocks on tiles";
    }
    auto all = le->encoder->Encode(pixels.data(), n_tiles, &le->ctx);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    const int64_t per_tile = le->encoder->tokens_per_tile() * le->encoder->n_embd();
    for (int64_t t = 0; t < n_tiles; ++t) {
      auto one = le->encoder->Encode(pixels.data() + t * tile, 1, &le->ctx);
      ASSERT_TRUE(one.ok());
      EXPECT_TRUE(std::equal(one->begin(), one->end(), all->begin() + t * per_tile))
          << "tile " << t << " differs between the batch and a single-tile call";
    }
    batched.push_back(std::move(*all));
  }
  const double nmse = Nmse(batched[1], batched[0]);
  std::printf("[ fast   ] demo shape%s, %s, 7 tiles: NMSE vs exact %.3g\n",
              odd_shape ? " (head_dim 48, d_ff 744)" : "",
              std::string(engine::DTypeName(vision_type)).c_str(), nmse);
  EXPECT_LE(nmse, 1e-3);
  std::remove(path.c_str());
}

// F16 and Q8_0 vision matrices (both become bf16 tiles in fast precision on AMX).
TEST(VisionBatchingTest, BatchesAndQueryBlocksMatchSingleTiles) {
  CheckBatching(engine::DType::kF16);
  CheckBatching(engine::DType::kQ8_0);
  CheckBatching(engine::DType::kF16, /*odd_shape=*/true);
}

// The bicubic keeps each source row's horizontal cubics while output rows need them; this
// per-pixel version (clip.cpp's order: 4 horizontal cubics, then the vertical one, coefficients
// formed in double) must give the same bytes, upscaling and downscaling, odd sizes and edges.
float CubicRef(float pm1, float p0, float p1, float p2, float t) {
  const float d0 = pm1 - p0, d2 = p1 - p0, d3 = p2 - p0;
  const float a1 = static_cast<float>(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
  const float a2 = static_cast<float>(1.0 / 2 * d0 + 1.0 / 2 * d2);
  const float a3 = static_cast<float>(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
  return p0 + a1 * t + a2 * t * t + a3 * t * t * t;
}

TEST(ResizeBicubicTest, EqualsThePerPixelDefinition) {
  std::mt19937 rng(9);
  for (const std::array<int, 4>& size : {std::array<int, 4>{37, 23, 100, 61}, {100, 61, 37, 23},
                                          {5, 1, 9, 4}, {64, 48, 64, 40}, {1, 1, 3, 3}}) {
    // Plain variables, not a structured binding: clang 14 cannot capture those in a lambda.
    const int w = size[0], h = size[1], tw = size[2], th = size[3];
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " -> " + std::to_string(tw) + "x" +
                 std::to_string(th));
    engine::models::RgbImage src{w, h, std::vector<uint8_t>(static_cast<size_t>(w * h * 3))};
    for (auto& b : src.rgb) b = static_cast<uint8_t>(rng() % 256);
    const auto got = engine::models::Resize(View(src), tw, th, engine::models::ResizeAlgo::kBicubic);
    const float sx = static_cast<float>(w) / tw, sy = static_cast<float>(h) / th;
    auto at = [&](int y, int x, int c) {
      y = std::clamp(y, 0, h - 1);
      x = std::clamp(x, 0, w - 1);
      return static_cast<float>(src.rgb[3 * (static_cast<size_t>(y) * w + x) + c]);
    };
    for (int i = 0; i < th; ++i) {
      for (int j = 0; j < tw; ++j) {
        const int x = static_cast<int>(sx * j), y = static_cast<int>(sy * i);
        const float dx = sx * j - x, dy = sy * i - y;
        for (int c = 0; c < 3; ++c) {
          float col[4];
          for (int r = 0; r < 4; ++r) {
            col[r] = CubicRef(at(y - 1 + r, x - 1, c), at(y - 1 + r, x, c), at(y - 1 + r, x + 1, c),
                              at(y - 1 + r, x + 2, c), dx);
          }
          const float v = CubicRef(col[0], col[1], col[2], col[3], dy);
          const auto want = static_cast<uint8_t>(std::min(std::max(std::round(v), 0.0f), 255.0f));
          ASSERT_EQ(got.rgb[3 * (static_cast<size_t>(i) * tw + j) + c], want)
              << "pixel " << j << "," << i << " channel " << c;
        }
      }
    }
  }
}

// The corner-aligned bilinear stretch of the idefics3 global image, on hand-computed cases: the
// first and last outputs sample the first and last source pixels, interpolation truncates, a
// 1-pixel target samples pixel 0 and a 1-pixel source is replicated.
TEST(ResizeBilinearTest, CornerAlignedAndTruncating) {
  using engine::models::ResizeAlgo;
  auto row = [](std::vector<uint8_t> red) {
    engine::models::RgbImage img{static_cast<int32_t>(red.size()), 1, {}};
    img.rgb.assign(red.size() * 3, 0);  // (insert() of a braced list trips GCC 12's -Wstringop-overflow)
    for (size_t i = 0; i < red.size(); ++i) img.rgb[3 * i] = red[i];
    return img;
  };
  auto reds = [](const engine::models::RgbImage& img) {
    std::vector<int> out;
    for (size_t i = 0; i < img.rgb.size(); i += 3) out.push_back(img.rgb[i]);
    return out;
  };
  const auto r3 = row({10, 20, 250});
  EXPECT_EQ(reds(engine::models::Resize(View(r3), 2, 1, ResizeAlgo::kBilinear)),
            (std::vector<int>{10, 250}));
  const auto r4 = row({0, 10, 21, 40});  // ratio 1.5: x = 1 -> 10 + 11 * 0.5 = 15.5 -> 15
  EXPECT_EQ(reds(engine::models::Resize(View(r4), 3, 1, ResizeAlgo::kBilinear)),
            (std::vector<int>{0, 15, 40}));
  EXPECT_EQ(reds(engine::models::Resize(View(r4), 1, 1, ResizeAlgo::kBilinear)),
            (std::vector<int>{0}));
  const auto r1 = row({77});
  EXPECT_EQ(reds(engine::models::Resize(View(r1), 3, 2, ResizeAlgo::kBilinear)),
            (std::vector<int>(6, 77)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VisionParityTest,
                         ::testing::Values("tiny-llava", "tiny-llava16", "tiny-internvl", "tiny-gemma3",
                                           "tiny-smolvlm"));

// Tile grids and token counts that llama.cpp's chunking (golden.json) implies.
TEST(VisionStructureTest, TilesAndTokensPerTile) {
  std::string error;
  auto llava = LoadEncoder("tiny-llava", &error);
  ASSERT_NE(llava->encoder, nullptr) << error;
  auto smol = LoadEncoder("tiny-smolvlm", &error);
  ASSERT_NE(smol->encoder, nullptr) << error;
  EXPECT_EQ(llava->encoder->tokens_per_tile(), 16);
  EXPECT_EQ(llava->encoder->n_embd(), 64);
  EXPECT_EQ(smol->encoder->tokens_per_tile(), 16);
  EXPECT_EQ(smol->encoder->n_embd(), 64);

  struct Expect {
    int w, h, cols, rows;
  };
  for (const Expect& e : {Expect{128, 96, 2, 2}, Expect{128, 128, 2, 2}, Expect{50, 100, 1, 2},
                          Expect{300, 20, 2, 1}, Expect{64, 64, 2, 2}}) {
    engine::models::RgbImage img{e.w, e.h, std::vector<uint8_t>(size_t(e.w) * e.h * 3, 77)};
    auto pre = PreprocessImage(smol->encoder->config(), View(img));
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    EXPECT_EQ(pre->grid_cols, e.cols) << e.w << "x" << e.h;
    EXPECT_EQ(pre->grid_rows, e.rows) << e.w << "x" << e.h;
    EXPECT_TRUE(pre->has_global);
    EXPECT_EQ(pre->n_tiles, e.cols * e.rows + 1);
    EXPECT_EQ(pre->pixels.size(), size_t(pre->n_tiles) * 3 * 64 * 64);
  }
  for (const Expect& e : {Expect{64, 48, 0, 0}, Expect{7, 300, 0, 0}, Expect{32, 32, 0, 0}}) {
    engine::models::RgbImage img{e.w, e.h, std::vector<uint8_t>(size_t(e.w) * e.h * 3, 9)};
    auto pre = PreprocessImage(llava->encoder->config(), View(img));
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    EXPECT_EQ(pre->n_tiles, 1);
    EXPECT_FALSE(pre->has_global);
    EXPECT_EQ(pre->pixels.size(), size_t(3 * 32 * 32));
  }
  engine::models::RgbImage bad{4, 4, std::vector<uint8_t>(10)};
  EXPECT_FALSE(PreprocessImage(llava->encoder->config(), View(bad)).ok());
}

// LLaVA-1.6 (anyres): the pinpoint a size is fitted to, its slices and the overview last; small
// images are the overview alone; the token budget's levels allow fewer slices, then none.
TEST(VisionStructureTest, AnyresSlicesAndOverview) {
  std::string error;
  auto llava16 = LoadEncoder("tiny-llava16", &error);
  ASSERT_NE(llava16->encoder, nullptr) << error;
  const engine::models::VisionConfig& c = llava16->encoder->config();
  ASSERT_FALSE(c.grid_pinpoints.empty());
  const int s = c.image_size;
  EXPECT_EQ(llava16->encoder->tokens_per_tile(), 16);
  struct Expect {
    int w, h, cols, rows;
  };
  // golden.json: 64x48 -> 2x2 slices + overview (5 chunks); 32x32 -> the overview alone.
  for (const Expect& e : {Expect{64, 48, 2, 2}, Expect{32, 32, 0, 0}, Expect{20, 7, 0, 0}}) {
    engine::models::RgbImage img{e.w, e.h, std::vector<uint8_t>(size_t(e.w) * e.h * 3, 40)};
    auto pre = PreprocessImage(c, View(img));
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    EXPECT_EQ(pre->grid_cols, e.cols) << e.w << "x" << e.h;
    EXPECT_EQ(pre->grid_rows, e.rows) << e.w << "x" << e.h;
    EXPECT_EQ(pre->n_tiles, e.cols * e.rows + 1) << e.w << "x" << e.h;
    EXPECT_EQ(pre->has_global, e.cols > 0);
    const auto plan = llava16->encoder->PlanImage(e.w, e.h, 0);
    EXPECT_EQ(plan.rows, pre->n_tiles * 16) << e.w << "x" << e.h;
    EXPECT_EQ(plan.work_units, pre->n_tiles);
  }
  // The best fit keeps the most pixels, then wastes the least: a wide image picks a wide grid.
  const std::vector<std::array<int32_t, 2>> pins = {{s, 2 * s}, {2 * s, s}, {2 * s, 2 * s}, {3 * s, s}};
  EXPECT_EQ(engine::models::SelectBestResolution(3 * s, s, pins, s, 0), (std::array<int32_t, 2>{3 * s, s}));
  EXPECT_EQ(engine::models::SelectBestResolution(s, 2 * s, pins, s, 0), (std::array<int32_t, 2>{s, 2 * s}));
  EXPECT_EQ(engine::models::SelectBestResolution(4 * s, 4 * s, pins, s, 0), (std::array<int32_t, 2>{2 * s, 2 * s}));
  EXPECT_EQ(engine::models::SelectBestResolution(4 * s, 4 * s, pins, s, 2), (std::array<int32_t, 2>{s, 2 * s}));
  EXPECT_EQ(engine::models::SelectBestResolution(4 * s, 4 * s, pins, s, -1), (std::array<int32_t, 2>{0, 0}));
  // Shrink levels of a large image: fewer slices each, the last the overview alone.
  const int w = 4 * s, h = 3 * s;
  const int32_t max_level = llava16->encoder->MaxShrinkLevel(w, h);
  ASSERT_GE(max_level, 1);
  int64_t rows = llava16->encoder->PlanImage(w, h, 0).rows;
  for (int level = 1; level <= max_level; ++level) {
    const auto plan = llava16->encoder->PlanImage(w, h, level);
    EXPECT_LT(plan.rows, rows) << "level " << level;
    rows = plan.rows;
    engine::models::RgbImage img{w, h, std::vector<uint8_t>(size_t(w) * h * 3, 40)};
    auto pre = llava16->encoder->Preprocess(View(img), plan);
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    EXPECT_EQ(pre->n_tiles * 16, plan.rows) << "level " << level;
  }
  EXPECT_EQ(rows, 16) << "the last level is the overview alone";
}

// vlmd-synth writes LLaVA-1.6 and InternVL vision towers (the benchmark presets, shrunk here;
// InternVL also with InternViT-6B's q/k-norm blocks) that load and encode with the layouts of
// their families, in both precisions.
TEST(VisionStructureTest, SyntheticLlava16AndInternVlTowersEncode) {
  for (const char* name : {"llava16-vit", "internvl3-2b-vit", "tiny-internvl6b"}) {
    SCOPED_TRACE(name);
    auto preset = engine::synth::FindPreset(name);
    ASSERT_TRUE(preset.has_value());
    engine::synth::VisionShape& v = preset->vision;
    v.image_size = 56;
    v.patch_size = 14;
    v.n_layers = 2;
    v.d_model = 64;
    v.n_heads = 2;
    v.d_ff = 128;
    v.feature_layer = v.feature_layer > 0 ? 2 : 0;
    for (int32_t& side : v.grid_pinpoints) side = side / 336 * 56;
    preset->text.d_model = 64;
    const std::string path = ::testing::TempDir() + "/vlmd_" + std::string(name) + "_mmproj.gguf";
    ASSERT_TRUE(engine::synth::WriteSyntheticMmproj(*preset, {}, path).ok());
    for (auto precision : {engine::ops::Precision::kExact, engine::ops::Precision::kFast}) {
      std::string error;
      auto le = LoadEncoderFile(path, &error, precision);
      ASSERT_NE(le->encoder, nullptr) << error;
      engine::models::RgbImage img{112, 56, std::vector<uint8_t>(size_t(112) * 56 * 3, 90)};
      auto pre = PreprocessImage(le->encoder->config(), View(img));
      ASSERT_TRUE(pre.ok()) << pre.status().ToString();
      EXPECT_EQ(pre->grid_cols, 2);  // 112x56 fits the 2 x 1 grid exactly
      EXPECT_EQ(pre->grid_rows, 1);
      auto out = le->encoder->Encode(pre->pixels.data(), pre->n_tiles, &le->ctx);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(static_cast<int64_t>(out->size()), 3 * le->encoder->tokens_per_tile() * 64);
      EXPECT_TRUE(std::all_of(out->begin(), out->end(), [](float x) { return std::isfinite(x); }));
    }
  }
}

// InternVL: llama.cpp's candidate grids (a tiles across outer, b down inner), tiles then the
// thumbnail, small images the thumbnail alone.
TEST(VisionStructureTest, InternVlGridsTilesAndThumbnail) {
  using Grid = std::array<int32_t, 2>;
  EXPECT_EQ(engine::models::InternVlGrids(10, 1, 4),
            (std::vector<Grid>{{10, 10}, {10, 20}, {10, 30}, {10, 40}, {20, 10}, {20, 20}, {30, 10}, {40, 10}}));
  // min_tiles bounds both sides (b >= min_tiles too): with 2..4 only the 2x2 grid is left.
  EXPECT_EQ(engine::models::InternVlGrids(10, 2, 4), (std::vector<Grid>{{20, 20}}));
  std::string error;
  auto internvl = LoadEncoder("tiny-internvl", &error);
  ASSERT_NE(internvl->encoder, nullptr) << error;
  EXPECT_EQ(internvl->encoder->tokens_per_tile(), 16);
  struct Expect {
    int w, h, cols, rows;
  };
  // golden.json: 96x64 -> 3x2 tiles + thumbnail (7 chunks); 32x32 -> the thumbnail alone.
  for (const Expect& e : {Expect{96, 64, 3, 2}, Expect{32, 32, 0, 0}}) {
    engine::models::RgbImage img{e.w, e.h, std::vector<uint8_t>(size_t(e.w) * e.h * 3, 40)};
    auto pre = PreprocessImage(internvl->encoder->config(), View(img));
    ASSERT_TRUE(pre.ok()) << pre.status().ToString();
    EXPECT_EQ(pre->grid_cols, e.cols) << e.w << "x" << e.h;
    EXPECT_EQ(pre->grid_rows, e.rows) << e.w << "x" << e.h;
    EXPECT_EQ(pre->n_tiles, e.cols * e.rows + 1);
  }
}

// ggml's GELU as the encoder applies it: f16(gelu(f16(x))) for |x| < 10, x itself (not rounded)
// for x >= 10 and 0 for x <= -10, as ggml_vec_gelu_f32 does.
TEST(VisionActivationTest, GeluLikeGgmlAtTheClampEdges) {
  const auto& kt = engine::kernels::GetKernelTable(engine::kernels::Isa::kRef);
  std::vector<float> x = {10.0f, 10.001f, 123.456f, -10.0f, -10.5f, 9.99f, -9.99f, 0.3333f};
  std::vector<float> y = x;
  ASSERT_TRUE(engine::ops::ActivateLikeGgml(kt, nullptr, engine::ops::Activation::kGeluTanh,
                                               y.data(), static_cast<int64_t>(y.size()))
                  .ok());
  EXPECT_EQ(y[0], 10.0f);
  EXPECT_EQ(y[1], 10.001f);  // not representable in f16: passed through unrounded
  EXPECT_EQ(y[2], 123.456f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], 0.0f);
  for (int i : {5, 6, 7}) {
    const float xr = engine::F16ToF32(engine::F32ToF16(x[i]));
    const double g = 0.5 * xr * (1.0 + std::tanh(0.7978845608 * (xr + 0.044715 * xr * xr * xr)));
    const float want = engine::F16ToF32(engine::F32ToF16(static_cast<float>(g)));
    EXPECT_NEAR(y[i], want, std::fabs(want) * 1e-3) << x[i];  // one f16 ulp is ~1e-3
  }
}

// Fast precision (float matrices as int8 blocks on the packed matmul) stays within image-embedding
// NMSE 1e-3 of exact on every fixture image: the bound for `--precision fast`.
TEST(VisionFastPrecisionTest, WithinNmse1e3OfExact) {
  for (const std::string fixture :
       {"tiny-llava", "tiny-llava16", "tiny-internvl", "tiny-gemma3", "tiny-smolvlm"}) {
    std::string error;
    auto exact = LoadEncoder(fixture, &error);
    ASSERT_NE(exact->encoder, nullptr) << error;
    auto fast = LoadEncoder(fixture, &error, engine::ops::Precision::kFast);
    ASSERT_NE(fast->encoder, nullptr) << error;
    if (fast->ctx.kernels->packed_matmul == nullptr) GTEST_SKIP() << "no packed matmul on this CPU";
    if (fast->ctx.kernels->tile_bf16_matmul != nullptr) {
      // InternViT's layer scale is folded into its projections, so it runs on tiles too.
      EXPECT_TRUE(fast->encoder->vit()->UsesTileBlocks(*fast->ctx.kernels)) << fixture;
    }
    for (const ImageCase& ic : ImageCases(fixture)) {
      SCOPED_TRACE(fixture + "/" + ic.name);
      const auto img = ReadPngRgb(FixturePath(fixture + "/" + ic.image));
      auto pre = PreprocessImage(exact->encoder->config(), View(img));
      ASSERT_TRUE(pre.ok()) << pre.status().ToString();
      auto want = exact->encoder->Encode(pre->pixels.data(), pre->n_tiles, &exact->ctx);
      auto got = fast->encoder->Encode(pre->pixels.data(), pre->n_tiles, &fast->ctx);
      ASSERT_TRUE(want.ok() && got.ok());
      const double nmse = Nmse(*got, *want);
      std::printf("[ fast   ] %s/%s: NMSE vs exact %.3g\n", fixture.c_str(), ic.name.c_str(), nmse);
      EXPECT_GT(nmse, 0.0) << "the fast encoder did not take the int8 or bf16 tile path";
      EXPECT_LE(nmse, 1e-3);
    }
  }
}

// Encoding A, then B (another tile count), then A again gives A's first result bit for bit, and
// a batch of tiles equals the tiles encoded one at a time: no shape state survives a call.
TEST(VisionStatelessTest, AlternatingSizesAndBatching) {
  std::string error;
  auto le = LoadEncoder("tiny-smolvlm", &error);
  ASSERT_NE(le->encoder, nullptr) << error;
  const auto& enc = *le->encoder;
  auto a_img = ReadPngRgb(FixturePath("tiny-smolvlm/images/img-128x96.png"));
  auto b_img = ReadPngRgb(FixturePath("tiny-smolvlm/images/img-50x100.png"));
  ASSERT_GT(a_img.width, 0);
  ASSERT_GT(b_img.width, 0);
  auto a = PreprocessImage(enc.config(), View(a_img));
  auto b = PreprocessImage(enc.config(), View(b_img));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_NE(a->n_tiles, b->n_tiles);
  auto a1 = enc.Encode(a->pixels.data(), a->n_tiles, &le->ctx);
  auto b1 = enc.Encode(b->pixels.data(), b->n_tiles, &le->ctx);
  auto a2 = enc.Encode(a->pixels.data(), a->n_tiles, &le->ctx);
  ASSERT_TRUE(a1.ok() && b1.ok() && a2.ok());
  EXPECT_EQ(*a1, *a2);
  engine::models::VisionContext fresh;
  fresh.kernels = le->ctx.kernels;
  auto b_fresh = enc.Encode(b->pixels.data(), b->n_tiles, &fresh);
  ASSERT_TRUE(b_fresh.ok());
  EXPECT_EQ(*b1, *b_fresh);
  // One tile at a time vs the batch: same math per row; allow only rounding-level differences
  // from a different matmul blocking.
  const int64_t tile_floats = 3 * 64 * 64, per_tile = enc.tokens_per_tile() * enc.n_embd();
  for (int64_t t = 0; t < a->n_tiles; ++t) {
    auto one = enc.Encode(a->pixels.data() + t * tile_floats, 1, &le->ctx);
    ASSERT_TRUE(one.ok());
    const std::span<const float> batched(a1->data() + t * per_tile, per_tile);
    EXPECT_LE(Nmse(*one, batched), 1e-10) << "tile " << t;
  }
}

}  // namespace
}  // namespace vlmd::testing
