// Qwen VL vision parity with llama.cpp (tests/fixtures/tiny-qwen2vl, tiny-qwen25vl,
// tiny-qwen3vl; FAMILIES.md): every image chunk of every case is preprocessed to the golden
// size and merged grid and encoded within the fixtures' embedding NMSE (1e-5), in exact
// precision; fast precision within 1e-3 (the bound the other families keep). Also the size rule
// on the FAMILIES.md examples and the align-corners position-grid resize.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "engine/models/preprocess_vision.h"
#include "engine/models/qwen_vit.h"
#include "fixture_json.h"
#include "vision_test_util.h"

namespace vlmd::testing {
namespace {

using engine::models::PreprocessedImage;
using engine::models::RgbImage;
using engine::models::View;
using engine::ops::Precision;
using nlohmann::json;

struct QwenCase {
  const char* fixture;
  Precision precision;
};

void PrintTo(const QwenCase& c, std::ostream* os) {
  *os << c.fixture << " " << engine::ops::PrecisionName(c.precision);
}

class QwenVisionParityTest : public ::testing::TestWithParam<QwenCase> {};

TEST_P(QwenVisionParityTest, EveryImageChunkMatchesLlamaCpp) {
  const QwenCase& qc = GetParam();
  std::string error;
  const json golden = ReadFixtureJson(std::string(qc.fixture) + "/golden.json", &error);
  ASSERT_TRUE(error.empty()) << error;
  auto le = LoadEncoder(qc.fixture, &error, qc.precision);
  ASSERT_NE(le->encoder, nullptr) << error;
  const auto& enc = *le->encoder;
  if (qc.precision == Precision::kFast && le->ctx.kernels->tile_bf16_matmul != nullptr) {
    EXPECT_TRUE(enc.UsesTileBlocks(*le->ctx.kernels))
        << "fast precision on AMX must run the blocks on tiles";
  }
  const double tol = qc.precision == Precision::kExact
                         ? golden["tolerance"]["image_embeddings_nmse"].get<double>()
                         : 1e-3;
  int checked = 0;
  for (const json& c : golden["cases"]) {
    for (const json& ch : c["chunks"]) {
      if (ch["type"] != "image") continue;
      SCOPED_TRACE(c["name"].get<std::string>() + " chunk " + std::to_string(ch["index"].get<int>()));
      const RgbImage img = ReadPngRgb(FixturePath(std::string(qc.fixture) + "/images/" +
                                                  ch["image"].get<std::string>()));
      ASSERT_GT(img.width, 0);
      auto pre = engine::models::PreprocessImage(enc.config(), View(img));
      ASSERT_TRUE(pre.ok()) << pre.status().ToString();
      EXPECT_EQ(pre->width, ch["preprocessed_size"][0].get<int>());
      EXPECT_EQ(pre->height, ch["preprocessed_size"][1].get<int>());
      EXPECT_EQ(pre->grid_cols, ch["grid"][0].get<int>());
      EXPECT_EQ(pre->grid_rows, ch["grid"][1].get<int>());
      const int64_t n_tok = enc.ImageTokens(*pre);
      ASSERT_EQ(n_tok, ch["n_tokens"].get<int64_t>());
      ASSERT_EQ(enc.n_embd(), ch["embd_shape"][1].get<int64_t>());
      std::vector<float> out(static_cast<size_t>(n_tok * enc.n_embd()));
      Status s = enc.EncodeImage(*pre, &le->ctx, out.data());
      ASSERT_TRUE(s.ok()) << s.ToString();
      const std::vector<float> ref =
          ReadF32File(FixturePath(std::string(qc.fixture) + "/" + ch["embd_file"].get<std::string>()));
      ASSERT_EQ(ref.size(), out.size());
      const double nmse = Nmse(out, ref);
      EXPECT_LE(nmse, tol);
      std::ostringstream nmse_text;
      nmse_text << std::scientific << nmse;
      RecordProperty("nmse_" + std::to_string(checked), nmse_text.str());
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);  // every fixture has three one-image cases and a two-image case
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, QwenVisionParityTest,
    ::testing::Values(QwenCase{"tiny-qwen2vl", Precision::kExact},
                      QwenCase{"tiny-qwen25vl", Precision::kExact},
                      QwenCase{"tiny-qwen3vl", Precision::kExact},
                      QwenCase{"tiny-qwen2vl", Precision::kFast},
                      QwenCase{"tiny-qwen25vl", Precision::kFast},
                      QwenCase{"tiny-qwen3vl", Precision::kFast}),
    [](const ::testing::TestParamInfo<QwenCase>& i) {
      std::string s = std::string(i.param.fixture) + "_" +
                      std::string(engine::ops::PrecisionName(i.param.precision));
      for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return s;
    });

// The sizes FAMILIES.md 2.3 lists (patch 14: align 28, min 8 tokens, max 4096).
TEST(QwenPreprocessTest, SizeRuleOnTheDocumentedExamples) {
  engine::models::VisionConfig c;
  c.projector = engine::models::ProjectorType::kQwen2vl;
  c.patch_size = 14;
  struct Want {
    int w, h, rw, rh;
  };
  for (const Want& x : {Want{168, 112, 168, 112}, Want{140, 140, 140, 140}, Want{100, 70, 112, 84},
                        Want{50, 40, 112, 84}, Want{10, 1000, 28, 1008}}) {
    int32_t rw = 0, rh = 0;
    engine::models::QwenResizedSize(c, x.w, x.h, 0, &rw, &rh);
    EXPECT_EQ(rw, x.rw) << x.w << "x" << x.h;
    EXPECT_EQ(rh, x.rh) << x.w << "x" << x.h;
  }
  // Over the token limit: scaled down to at most max tokens, aspect kept, floor to 28.
  int32_t rw = 0, rh = 0;
  engine::models::QwenResizedSize(c, 4000, 3000, 0, &rw, &rh);
  EXPECT_LE(int64_t{rw / 28} * (rh / 28), 4096);
  EXPECT_EQ(rw % 28, 0);
  EXPECT_NEAR(static_cast<double>(rw) / rh, 4.0 / 3.0, 0.03);
  // An extreme aspect ratio (a 50-megapixel image one pixel high) stays within the limit.
  engine::models::QwenResizedSize(c, 50'000'000, 1, 0, &rw, &rh);
  EXPECT_EQ(rh, 28);
  EXPECT_LE(int64_t{rw / 28} * (rh / 28), 4096);
  EXPECT_GE(int64_t{rw / 28} * (rh / 28), 4000);
  engine::models::QwenResizedSize(c, 1, 50'000'000, 0, &rw, &rh);
  EXPECT_EQ(rw, 28);
  EXPECT_LE(int64_t{rw / 28} * (rh / 28), 4096);
  // A lower limit (token budgets) shrinks in 28-pixel units.
  engine::models::QwenResizedSize(c, 4000, 3000, 64, &rw, &rh);
  EXPECT_LE(int64_t{rw / 28} * (rh / 28), 64);
  EXPECT_GE(int64_t{rw / 28} * (rh / 28), 40);
}

// The padded case of FAMILIES.md: 100x70 -> content 112x79 at (0, 2) on a black 112x84 canvas.
// The token budget's levels: each the next smaller size the smart resize gives the image (no
// limit between two levels gives a size between theirs), the last at least min_tokens and the
// next one the resize could give below it under. Sizes include 259x1045, where a search below
// the row count (not the limit) skipped sizes, a photo, and extreme aspect ratios.
TEST(QwenPreprocessTest, BudgetLevelsAreEverySmallerSizeDownToTheMinimum) {
  std::string error;
  auto le = vlmd::testing::LoadEncoder("tiny-qwen25vl", &error);
  ASSERT_NE(le->encoder, nullptr) << error;
  const engine::models::VisionConfig& c = le->encoder->config();
  const int32_t align = c.patch_size * c.spatial_merge;
  for (const auto& size : std::vector<std::pair<int32_t, int32_t>>{
           {259, 1045}, {168, 112}, {4000, 3000}, {1, 3000}, {3000, 1}, {1045, 259}}) {
    const int32_t w = size.first, h = size.second;  // (clang 15 cannot capture bindings)
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    auto rows_at = [&](int32_t limit) {
      int32_t rw = 0, rh = 0;
      engine::models::QwenResizedSize(c, w, h, limit, &rw, &rh);
      return int64_t{rw / align} * (rh / align);
    };
    const std::vector<engine::models::ImagePlan> plans = le->encoder->PlanLevels(w, h);
    ASSERT_FALSE(plans.empty());
    ASSERT_EQ(static_cast<int32_t>(plans.size()) - 1, le->encoder->MaxShrinkLevel(w, h));
    EXPECT_EQ(plans[0].rows, rows_at(0));
    std::set<int64_t> sizes;  // every row count a limit in [min, max] gives
    for (int32_t t = c.min_tokens; t <= c.max_tokens; ++t) sizes.insert(rows_at(t));
    std::vector<int64_t> want;  // those at or above the minimum, largest first
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
      if (*it >= c.min_tokens && *it <= plans[0].rows) want.push_back(*it);
    }
    std::vector<int64_t> got;
    for (const auto& p : plans) {
      got.push_back(p.rows);
      EXPECT_EQ(p.rows, int64_t{p.width / align} * (p.height / align));
      EXPECT_EQ(le->encoder->PlanImage(w, h, p.level).rows, p.rows);
    }
    EXPECT_EQ(got, want);
  }
}

TEST(QwenPreprocessTest, AspectPreservingResizeIsPaddedBlack) {
  engine::models::VisionConfig c;
  c.projector = engine::models::ProjectorType::kQwen25vl;
  c.patch_size = 14;
  c.image_mean = {0, 0, 0};
  c.image_std = {1, 1, 1};
  RgbImage img{100, 70, std::vector<uint8_t>(100 * 70 * 3, 255)};
  auto pre = engine::models::PreprocessImage(c, View(img));
  ASSERT_TRUE(pre.ok());
  ASSERT_EQ(pre->width, 112);
  ASSERT_EQ(pre->height, 84);
  const auto px = [&](int ch, int y, int x) { return pre->pixels[(ch * 84 + y) * 112 + x]; };
  EXPECT_EQ(px(0, 0, 50), 0.0f);    // padding row above the content
  EXPECT_EQ(px(0, 1, 50), 0.0f);
  EXPECT_EQ(px(0, 2, 50), 1.0f);    // first content row
  EXPECT_EQ(px(2, 80, 111), 1.0f);  // last content row (2 + 79 - 1)
  EXPECT_EQ(px(1, 81, 0), 0.0f);    // padding below
}

// ggml's align-corners bilinear: corners are the grid's corners, an interior point is the
// bilinear mix of its four neighbours; a side x side target is the grid itself.
TEST(QwenPositionGridTest, AlignCornersResize) {
  const int32_t side = 3;
  std::vector<float> grid(side * side * 2);
  for (int i = 0; i < side * side; ++i) {
    grid[2 * i] = static_cast<float>(i);           // value = y * 3 + x
    grid[2 * i + 1] = static_cast<float>(i % 3);  // value = x
  }
  EXPECT_EQ(engine::models::ResizePositionGrid(grid, side, 2, 3, 3), grid);
  const auto out = engine::models::ResizePositionGrid(grid, side, 2, 5, 4);  // 5 wide, 4 high
  ASSERT_EQ(out.size(), 5u * 4u * 2u);
  auto at = [&](int y, int x, int k) { return out[(y * 5 + x) * 2 + k]; };
  EXPECT_FLOAT_EQ(at(0, 0, 0), 0.0f);
  EXPECT_FLOAT_EQ(at(3, 4, 0), 8.0f);
  EXPECT_FLOAT_EQ(at(0, 4, 0), 2.0f);
  EXPECT_FLOAT_EQ(at(0, 2, 1), 1.0f);  // x = 2 * (2 / 4) = 1 exactly
  // A linear function of (y, x) is reproduced everywhere: y_src = i1 * 2/3, x_src = i0 * 2/4.
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 5; ++x) {
      EXPECT_NEAR(at(y, x, 0), 3.0f * (y * 2.0f / 3.0f) + x * 0.5f, 1e-5f) << y << " " << x;
    }
  }
}

}  // namespace
}  // namespace vlmd::testing
