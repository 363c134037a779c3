// The ViT block's q/k norms (InternViT-6B): one block written to a GGUF file, loaded and run by
// vlmd, against the block computed here in double as llama.cpp's build_vit defines it - the
// norm with a weight and no bias applied to q and k after their projections, over the whole
// projection or per head as the weight's width says; LayerNorm, or RMSNorm (with an optional
// bias) for the 6B ViT. Exact precision within f16-attention rounding, fast precision (on the
// tile unit where the CPU has one) within 1e-3; without the norms the block is far off, so the
// comparison sees them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/vit_block.h"
#include "test_util.h"

namespace vlmd::engine::models {
namespace {

// kFf is not a multiple of 32, as Qwen2.5-VL's 3420 and SigLIP-so400m's 4304 are not: the fast
// precision packs the down projection with a zero-padded last block.
constexpr int64_t kD = 64, kFf = 100, kHeads = 2, kHd = 32, kRows = 40;
constexpr float kEps = 1e-6f;

struct BlockTensors {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b, wq, wk, wv, wo, bq, bk, bv, bo, w_up, b_up,
      w_down, b_down, ls1, ls2, q_norm, k_norm;
};

std::vector<float> Random(size_t n, std::mt19937* rng, float mean, float sd) {
  std::normal_distribution<float> dist(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

BlockTensors MakeTensors(int64_t qk_width, uint32_t seed) {
  std::mt19937 rng(seed);
  const float wsd = 1.0f / std::sqrt(static_cast<float>(kD));
  BlockTensors t;
  t.ln1_w = Random(kD, &rng, 1.0f, 0.2f);
  t.ln1_b = Random(kD, &rng, 0.0f, 0.1f);
  t.ln2_w = Random(kD, &rng, 1.0f, 0.2f);
  t.ln2_b = Random(kD, &rng, 0.0f, 0.1f);
  for (auto* w : {&t.wq, &t.wk, &t.wv, &t.wo}) *w = Random(kD * kD, &rng, 0.0f, wsd);
  for (auto* b : {&t.bq, &t.bk, &t.bv, &t.bo}) *b = Random(kD, &rng, 0.0f, 0.5f);
  t.w_up = Random(kFf * kD, &rng, 0.0f, wsd);
  t.b_up = Random(kFf, &rng, 0.0f, 0.1f);
  t.w_down = Random(kD * kFf, &rng, 0.0f, 1.0f / std::sqrt(static_cast<float>(kFf)));
  t.b_down = Random(kD, &rng, 0.0f, 0.1f);
  t.ls1 = Random(kD, &rng, 0.5f, 0.2f);
  t.ls2 = Random(kD, &rng, 0.5f, 0.2f);
  // Norm weights far from 1, so that a missing norm shows.
  t.q_norm = Random(static_cast<size_t>(qk_width), &rng, 2.0f, 1.0f);
  t.k_norm = Random(static_cast<size_t>(qk_width), &rng, 2.0f, 1.0f);
  return t;
}

Status WriteBlock(const BlockTensors& t, const std::string& path) {
  gguf::GgufWriter w;
  auto add = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> ne) {
    return w.AddTensor("v.blk.0." + name, DType::kF32, ne,
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                                v.size() * sizeof(float)));
  };
  const auto q = static_cast<int64_t>(t.q_norm.size());
  VLMD_RETURN_IF_ERROR(add("ln1.weight", t.ln1_w, {kD}));
  VLMD_RETURN_IF_ERROR(add("ln1.bias", t.ln1_b, {kD}));
  VLMD_RETURN_IF_ERROR(add("ln2.weight", t.ln2_w, {kD}));
  VLMD_RETURN_IF_ERROR(add("ln2.bias", t.ln2_b, {kD}));
  VLMD_RETURN_IF_ERROR(add("attn_q.weight", t.wq, {kD, kD}));
  VLMD_RETURN_IF_ERROR(add("attn_k.weight", t.wk, {kD, kD}));
  VLMD_RETURN_IF_ERROR(add("attn_v.weight", t.wv, {kD, kD}));
  VLMD_RETURN_IF_ERROR(add("attn_out.weight", t.wo, {kD, kD}));
  VLMD_RETURN_IF_ERROR(add("attn_q.bias", t.bq, {kD}));
  VLMD_RETURN_IF_ERROR(add("attn_k.bias", t.bk, {kD}));
  VLMD_RETURN_IF_ERROR(add("attn_v.bias", t.bv, {kD}));
  VLMD_RETURN_IF_ERROR(add("attn_out.bias", t.bo, {kD}));
  VLMD_RETURN_IF_ERROR(add("attn_q_norm.weight", t.q_norm, {q}));
  VLMD_RETURN_IF_ERROR(add("attn_k_norm.weight", t.k_norm, {q}));
  VLMD_RETURN_IF_ERROR(add("ffn_up.weight", t.w_up, {kD, kFf}));
  VLMD_RETURN_IF_ERROR(add("ffn_up.bias", t.b_up, {kFf}));
  VLMD_RETURN_IF_ERROR(add("ffn_down.weight", t.w_down, {kFf, kD}));
  VLMD_RETURN_IF_ERROR(add("ffn_down.bias", t.b_down, {kD}));
  VLMD_RETURN_IF_ERROR(add("ls1.weight", t.ls1, {kD}));
  VLMD_RETURN_IF_ERROR(add("ls2.weight", t.ls2, {kD}));
  return w.WriteFile(path);
}

// y = norm(x) * w (+ b), over groups of `width` values.
void NormRef(std::vector<double>* x, const std::vector<float>& w, const std::vector<float>* b,
             bool rms) {
  const size_t width = w.size();
  for (size_t g = 0; g < x->size(); g += width) {
    double mean = 0, sq = 0;
    for (size_t i = 0; i < width; ++i) mean += (*x)[g + i] / static_cast<double>(width);
    if (rms) mean = 0;
    for (size_t i = 0; i < width; ++i) sq += ((*x)[g + i] - mean) * ((*x)[g + i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(width) + kEps);
    for (size_t i = 0; i < width; ++i) {
      (*x)[g + i] = ((*x)[g + i] - mean) * inv * w[i] + (b != nullptr ? (*b)[i] : 0.0);
    }
  }
}

// out[r, j] = sum_i in[r, i] w[j, i] + b[j]
std::vector<double> LinearRef(const std::vector<double>& in, int64_t k, const std::vector<float>& w,
                              const std::vector<float>& b) {
  const int64_t n_out = static_cast<int64_t>(b.size()), rows = static_cast<int64_t>(in.size()) / k;
  std::vector<double> out(static_cast<size_t>(rows * n_out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n_out; ++j) {
      double s = b[static_cast<size_t>(j)];
      for (int64_t i = 0; i < k; ++i) s += in[static_cast<size_t>(r * k + i)] * w[static_cast<size_t>(j * k + i)];
      out[static_cast<size_t>(r * n_out + j)] = s;
    }
  }
  return out;
}

std::vector<float> BlockRef(const BlockTensors& t, const std::vector<float>& x0, bool rms, bool qk_norm) {
  std::vector<double> x(x0.begin(), x0.end());
  std::vector<double> h = x;
  NormRef(&h, t.ln1_w, &t.ln1_b, rms);
  std::vector<double> q = LinearRef(h, kD, t.wq, t.bq), k = LinearRef(h, kD, t.wk, t.bk),
                      v = LinearRef(h, kD, t.wv, t.bv);
  if (qk_norm) {
    NormRef(&q, t.q_norm, nullptr, rms);
    NormRef(&k, t.k_norm, nullptr, rms);
  }
  std::vector<double> att(static_cast<size_t>(kRows * kD));
  for (int64_t hh = 0; hh < kHeads; ++hh) {
    for (int64_t i = 0; i < kRows; ++i) {
      std::vector<double> s(kRows);
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < kRows; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < kHd; ++e) dot += q[i * kD + hh * kHd + e] * k[j * kD + hh * kHd + e];
        s[j] = dot / std::sqrt(static_cast<double>(kHd));
        m = std::max(m, s[j]);
      }
      for (double& p : s) z += p = std::exp(p - m);
      for (int64_t e = 0; e < kHd; ++e) {
        double o = 0;
        for (int64_t j = 0; j < kRows; ++j) o += s[j] / z * v[j * kD + hh * kHd + e];
        att[i * kD + hh * kHd + e] = o;
      }
    }
  }
  const std::vector<double> o = LinearRef(att, kD, t.wo, t.bo);
  for (size_t i = 0; i < x.size(); ++i) x[i] += t.ls1[i % kD] * o[i];
  h = x;
  NormRef(&h, t.ln2_w, &t.ln2_b, rms);
  std::vector<double> u = LinearRef(h, kD, t.w_up, t.b_up);
  for (double& a : u) a = 0.5 * a * (1.0 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
  const std::vector<double> f = LinearRef(u, kFf, t.w_down, t.b_down);
  for (size_t i = 0; i < x.size(); ++i) x[i] += t.ls2[i % kD] * f[i];
  return std::vector<float>(x.begin(), x.end());
}

// The block as vlmd loads and runs it; *on_tiles: whether it took the tile path.
std::vector<float> BlockVlmd(const std::string& path, const std::vector<float>& x0, bool rms,
                             bool fast, bool qk_norm, bool* on_tiles) {
  auto file = gguf::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return {};
  auto isa = kernels::SelectIsa();
  EXPECT_TRUE(isa.ok());
  const kernels::KernelTable& kt = kernels::GetKernelTable(*isa);
  const VitBlockSpec spec{.d_model = kD, .d_ff = kFf, .n_heads = kHeads, .head_dim = kHd, .eps = kEps,
                          .norm = rms ? VitNorm::kRmsNorm : VitNorm::kLayerNorm, .fast = fast};
  const ops::WeightPacking packing{&kt, fast ? ops::Precision::kFast : ops::Precision::kExact,
                                   fast && kt.tile_bf16_matmul != nullptr};
  ops::PackedStore store;
  uint64_t released = 0;
  auto w = LoadVitBlock(**file, 0, spec, {.layer_scale = true, .qk_norm = qk_norm}, packing, &store,
                        &released);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return {};
  ThreadPool pool(2);
  VisionContext ctx;
  ctx.kernels = &kt;
  ctx.pool = &pool;
  std::vector<float> x = x0;
  const ops::RowSpan span{0, kRows};
  *on_tiles = VitBlocksOnTiles(spec, std::span<const VitBlockWeights>(&*w, 1), kt);
  const Status s = RunVitBlock(spec, *w, {.x = x.data(), .n = kRows, .spans = {&span, 1}}, *on_tiles, &ctx);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return x;
}

TEST(VitBlockQkNorm, WholeAndPerHeadNormsMatchTheDoubleReference) {
  for (const bool rms : {false, true}) {
    for (const int64_t width : {kD, kHd}) {
      SCOPED_TRACE(std::string(rms ? "RMSNorm" : "LayerNorm") + ", q/k norm width " + std::to_string(width));
      const BlockTensors t = MakeTensors(width, 7 + static_cast<uint32_t>(width) + (rms ? 100 : 0));
      const std::string path = ::testing::TempDir() + "/vlmd_vit_qk_norm_" + std::to_string(rms) +
                               "_" + std::to_string(width) + ".gguf";
      ASSERT_TRUE(WriteBlock(t, path).ok());
      std::mt19937 rng(3);
      const std::vector<float> x = Random(static_cast<size_t>(kRows * kD), &rng, 0.0f, 1.0f);
      const std::vector<float> want = BlockRef(t, x, rms, /*qk_norm=*/true);
      bool on_tiles = false;
      const std::vector<float> exact = BlockVlmd(path, x, rms, /*fast=*/false, true, &on_tiles);
      ASSERT_EQ(exact.size(), want.size());
      EXPECT_FALSE(on_tiles);
      EXPECT_LE(vlmd::testing::Nmse(exact, want), 1e-6);
      const std::vector<float> fast = BlockVlmd(path, x, rms, /*fast=*/true, true, &on_tiles);
      ASSERT_EQ(fast.size(), want.size());
      EXPECT_LE(vlmd::testing::Nmse(fast, want), 1e-3) << (on_tiles ? "on tiles" : "f32 / int8");
      // With the tile kernels (AMX) the fast block runs on them, its q/k norms in between.
      auto isa = kernels::SelectIsa();
      ASSERT_TRUE(isa.ok());
      EXPECT_EQ(on_tiles, kernels::GetKernelTable(*isa).tile_bf16_matmul != nullptr);
      // Loaded without the norms, the same file's block is far from the reference.
      const std::vector<float> no_norm = BlockVlmd(path, x, rms, /*fast=*/false, false, &on_tiles);
      EXPECT_GT(vlmd::testing::Nmse(no_norm, want), 1e-2);
    }
  }
}

TEST(VitBlockQkNorm, NormOfAnotherWidthIsRefusedNamingIt) {
  BlockTensors t = MakeTensors(kHd, 5);
  t.q_norm.resize(48);
  t.k_norm.resize(48);
  const std::string path = ::testing::TempDir() + "/vlmd_vit_qk_norm_bad.gguf";
  ASSERT_TRUE(WriteBlock(t, path).ok());
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  const kernels::KernelTable& kt = kernels::GetKernelTable(kernels::Isa::kRef);
  ops::PackedStore store;
  uint64_t released = 0;
  auto w = LoadVitBlock(**file, 0, {.d_model = kD, .d_ff = kFf, .n_heads = kHeads, .head_dim = kHd},
                        {.qk_norm = true}, {&kt}, &store, &released);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("attn_q_norm.weight"), std::string::npos) << w.status().ToString();
}

}  // namespace
}  // namespace vlmd::engine::models
