// Calibrated quantization's engine parts: the importance matrix the decoder's inputs give
// (ImatrixCollector), the logit comparison of vlmd-quantize eval, and the AWQ rewrite of a model
// (the rewritten model must compute what the original does).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>

#include <unistd.h>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/quantize_model.h"
#include "engine/runtime/imatrix_collector.h"
#include "engine/runtime/logit_comparison.h"
#include "engine/runtime/vlm_engine.h"
#include "engine/synth/model_presets.h"
#include "engine/synth/synthetic_model.h"
#include "engine/tensor/quantize.h"
#include "test_util.h"

namespace vlmd::engine::runtime {
namespace {

std::unique_ptr<VlmEngine> LoadEngine(const std::string& path) {
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = 256;
  auto e = VlmEngine::Load(path, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<float> ReadF32(const gguf::GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  std::vector<float> v(static_cast<size_t>(t->ne[0]));
  EXPECT_TRUE(DequantizeRow(t->type, t->data, v.data(), t->ne[0]).ok());
  return v;
}

const char* kPrompt = "<|im_start|>User: describe the picture of the red house by the sea, "
                      "please, in a few words<end_of_utterance>\nAssistant:";

// kPrompt's ids, after prefilling them with `collector` observing (empty on failure, reported).
std::vector<int32_t> ObservedPrompt(VlmEngine& engine, ImatrixCollector* collector) {
  auto ids = engine.tokenizer().Tokenize(kPrompt, true, true);
  EXPECT_TRUE(ids.ok());
  if (!ids.ok()) return {};
  engine.set_matmul_observer(collector);
  const Status s = engine.PromptLogits(*ids).status();
  engine.set_matmul_observer(nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() ? *ids : std::vector<int32_t>{};
}

TEST(ImatrixCollectorTest, SumsTheSquaresOfEachMatrixInputPerColumn) {
  const std::string path = vlmd::testing::FixturePath("tiny-smolvlm/text.gguf");
  auto engine = LoadEngine(path);
  ASSERT_NE(engine, nullptr);
  ImatrixCollector collector(16);
  const std::vector<int32_t> ids = ObservedPrompt(*engine, &collector);
  const int64_t rows = static_cast<int64_t>(ids.size());
  ASSERT_GE(rows, 16);
  const auto& c = engine->model().config();
  const auto& entries = collector.matrix().entries;
  ASSERT_EQ(entries.size(), static_cast<size_t>(7 * c.n_layers));  // q k v o gate up down
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      const auto it = entries.find(b + m + ".weight");
      ASSERT_NE(it, entries.end()) << b << m;
      EXPECT_EQ(it->second.counts, std::vector<float>{static_cast<float>(rows)}) << b << m;
      EXPECT_EQ(it->second.n_cols, std::string(m) == "ffn_down" ? c.d_ff
                                   : std::string(m) == "attn_output" ? c.q_dim() : c.d_model);
    }
    // One input, one observation: q, k and v (gate and up) have the same sums.
    EXPECT_EQ(entries.at(b + "attn_q.weight").sum_sq, entries.at(b + "attn_v.weight").sum_sq);
    EXPECT_EQ(entries.at(b + "ffn_gate.weight").sum_sq, entries.at(b + "ffn_up.weight").sum_sq);
  }
  // Layer 0's q input, computed here: RMSNorm(token embedding) * attn_norm.
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  const std::vector<float> norm = ReadF32(**file, "blk.0.attn_norm.weight");
  std::vector<double> want(static_cast<size_t>(c.d_model), 0.0);
  std::vector<float> e(static_cast<size_t>(c.d_model));
  for (int32_t id : ids) {
    ASSERT_TRUE(engine->model().EmbedToken(id, e.data()).ok());
    double ss = 0.0;
    for (float v : e) ss += double{v} * v;
    const double inv = 1.0 / std::sqrt(ss / c.d_model + c.rms_eps);
    for (int64_t i = 0; i < c.d_model; ++i) {
      const double x = e[i] * inv * norm[i];
      want[i] += x * x;
    }
  }
  const auto& got = entries.at("blk.0.attn_q.weight").sum_sq;
  for (int64_t i = 0; i < c.d_model; ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-3 * want[i] + 1e-6) << "column " << i;
  }
  EXPECT_EQ(collector.skipped(), 0);

  // A forward call of fewer rows than min_rows is not recorded (llama-imatrix's rule).
  ImatrixCollector strict(rows + 1);
  engine->set_matmul_observer(&strict);
  ASSERT_TRUE(engine->PromptLogits(ids).ok());
  engine->set_matmul_observer(nullptr);
  EXPECT_TRUE(strict.matrix().entries.empty());
  EXPECT_EQ(strict.skipped(), strict.observations());
  EXPECT_EQ(strict.observations(), 4 * c.n_layers);
}

// A mixture of experts' stacked matrices get one entry of n_expert matrices each (llama-imatrix's
// MUL_MAT_ID layout): every prompt row is counted once for each of the n_used experts it chose,
// gate and up share their sums, down sees the gated hidden rows of the expert width; the router
// is observed as a plain matrix. Such an entry then weighs each expert's rows in the quantizer.
TEST(ImatrixCollectorTest, ExpertsAreRecordedPerExpert) {
  auto preset = synth::FindPreset("tiny-qwen3vlmoe");
  ASSERT_TRUE(preset.has_value());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("vlmd-calib-moe-" + std::to_string(::getpid()) + ".gguf")).string();
  ASSERT_TRUE(synth::WriteSyntheticText(*preset, synth::SynthOptions{}, path).ok());
  auto engine = LoadEngine(path);
  ASSERT_NE(engine, nullptr);
  ImatrixCollector collector(16);
  const std::vector<int32_t> ids = ObservedPrompt(*engine, &collector);
  const int64_t rows = static_cast<int64_t>(ids.size());
  ASSERT_GE(rows, 16);
  const auto& c = engine->model().config();
  const auto& entries = collector.matrix().entries;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ASSERT_EQ(entries.count(b + "ffn_gate_inp.weight"), 1u) << b;
    EXPECT_EQ(entries.at(b + "ffn_gate_inp.weight").counts, std::vector<float>{static_cast<float>(rows)});
    for (const char* m : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      const auto it = entries.find(b + m + ".weight");
      ASSERT_NE(it, entries.end()) << b << m;
      const gguf::ImatrixEntry& e = it->second;
      ASSERT_EQ(e.counts.size(), static_cast<size_t>(c.n_expert)) << b << m;
      EXPECT_EQ(e.n_cols, std::string(m) == "ffn_down_exps" ? c.d_ff_exp : c.d_model);
      EXPECT_EQ(e.sum_sq.size(), static_cast<size_t>(e.n_cols * c.n_expert));
      float total = 0.0f;
      int used = 0;
      for (float n : e.counts) {
        total += n;
        used += n > 0.0f;
      }
      EXPECT_EQ(total, static_cast<float>(rows * c.n_expert_used)) << b << m;
      EXPECT_GT(used, 1) << b << m << ": the rows chose more than one expert";
    }
    EXPECT_EQ(entries.at(b + "ffn_gate_exps.weight").sum_sq, entries.at(b + "ffn_up_exps.weight").sum_sq);
  }
  // The per-expert entry weighs the stacked matrix in the quantizer (one importance per expert).
  const std::string out = path + ".q4_0.gguf";
  auto report = gguf::QuantizeModel(path, out, {.type = DType::kQ4_0, .imatrix = &collector.matrix()}, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  int weighted_experts = 0;
  for (const auto& t : report->tensors) weighted_experts += t.weighted && t.name.find("_exps") != std::string::npos;
  EXPECT_EQ(weighted_experts, 3 * c.n_layers);
  std::filesystem::remove(path);
  std::filesystem::remove(out);
}

TEST(LogitComparisonTest, KlTopOneAndNmse) {
  LogitComparison same;
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(same.Add(a, a).ok());
  EXPECT_EQ(same.rows(), 1);
  EXPECT_NEAR(same.mean_kl(), 0.0, 1e-12);
  EXPECT_EQ(same.top1_agreement(), 1.0);
  EXPECT_EQ(same.nmse(), 0.0);

  // Two tokens: p = softmax(ln 3, 0) = (3/4, 1/4), q = softmax(0, 0) = (1/2, 1/2):
  // KL = 3/4 ln(3/2) + 1/4 ln(1/2).
  LogitComparison two;
  ASSERT_TRUE(two.Add(std::vector<float>{std::log(3.0f), 0.0f}, std::vector<float>{0.0f, 0.0f}).ok());
  ASSERT_TRUE(two.Add(std::vector<float>{2.0f, 0.0f}, std::vector<float>{0.0f, 2.0f}).ok());
  const double kl1 = 0.75 * std::log(1.5) + 0.25 * std::log(0.5);
  const double p = 1.0 / (1.0 + std::exp(-2.0));  // softmax(2, 0)[0]
  const double kl2 = p * std::log(p / (1 - p)) + (1 - p) * std::log((1 - p) / p);
  EXPECT_NEAR(two.mean_kl(), (kl1 + kl2) / 2, 1e-6);
  EXPECT_NEAR(two.max_kl(), std::max(kl1, kl2), 1e-6);
  EXPECT_EQ(two.top1_agreement(), 0.5);  // argmax 0 vs 0 (a tie takes the first), then 0 vs 1
  const double ln3_sq = std::log(3.0) * std::log(3.0);
  EXPECT_NEAR(two.nmse(), (ln3_sq + 8.0) / (ln3_sq + 4.0), 1e-6);

  LogitComparison bad;
  EXPECT_FALSE(bad.Add(a, std::vector<float>{1.0f, 2.0f}).ok());
  EXPECT_FALSE(bad.Add({}, {}).ok());
  EXPECT_FALSE(bad.Add(a, std::vector<float>{1.0f, std::numeric_limits<float>::infinity(), 0.0f}).ok());
  EXPECT_EQ(bad.rows(), 0);
}

// The AWQ rewrite with forced scales (alpha 1 on an importance matrix with outlier columns) and
// no quantization (F32) is the same function: the logits of every prompt row match the
// original's; and quantized to Q4_0, the searched scales lower the activation-weighted error.
TEST(AwqRewriteTest, ScaledModelComputesTheSameAndSearchLowersTheError) {
  const std::string path = vlmd::testing::FixturePath("tiny-smolvlm/text.gguf");
  auto src = gguf::GgufFile::Open(path);
  ASSERT_TRUE(src.ok());
  gguf::ImportanceMatrix stats;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  for (const gguf::TensorInfo& t : (*src)->tensors()) {
    const std::string name(t.name);
    if (name.rfind("blk.", 0) != 0 || t.n_dims != 2) continue;
    gguf::ImatrixEntry e;
    e.n_cols = t.ne[0];
    e.counts = {10};
    for (int64_t j = 0; j < t.ne[0]; ++j) e.sum_sq.push_back(10 * u(rng) * (j % 13 == 0 ? 400.0f : 1.0f));
    stats.entries[name] = e;
  }
  // Shared inputs share their statistics, as the collector records them.
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    stats.entries[b + "attn_k.weight"] = stats.entries[b + "attn_v.weight"] = stats.entries[b + "attn_q.weight"];
    stats.entries[b + "ffn_up.weight"] = stats.entries[b + "ffn_gate.weight"];
  }
  const std::string dir = std::filesystem::temp_directory_path().string() + "/vlmd-awq-" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ThreadPool pool(2);
  gguf::QuantizeOptions plain{.type = DType::kF32};
  gguf::QuantizeOptions scaled{.type = DType::kF32, .awq = &stats, .awq_alpha = 1.0f};
  auto r0 = gguf::QuantizeModel(path, dir + "/plain.gguf", plain, &pool);
  auto r1 = gguf::QuantizeModel(path, dir + "/awq.gguf", scaled, &pool);
  ASSERT_TRUE(r0.ok() && r1.ok()) << r1.status().ToString();
  ASSERT_EQ(r1->awq_groups.size(), 6u);  // 2 layers x (attn_norm, ffn_norm, ffn_up)
  auto out = gguf::GgufFile::Open(dir + "/awq.gguf");
  ASSERT_TRUE(out.ok());
  for (const gguf::AwqGroup& g : r1->awq_groups) {
    EXPECT_EQ(g.alpha, 1.0f);
    float lo = 1e9f, hi = 0.0f;
    for (float s : g.scales) lo = std::min(lo, s), hi = std::max(hi, s);
    EXPECT_GT(hi / lo, 10.0f) << g.producer;  // the outlier columns are scaled well apart
  }
  // The norms changed (divided by the scales), so the match below is not a copy's.
  EXPECT_NE(ReadF32(**out, "blk.0.attn_norm.weight"), ReadF32(**src, "blk.0.attn_norm.weight"));

  auto a = LoadEngine(dir + "/plain.gguf");
  auto b = LoadEngine(dir + "/awq.gguf");
  ASSERT_TRUE(a && b);
  auto ids = a->tokenizer().Tokenize(kPrompt, true, true);
  ASSERT_TRUE(ids.ok());
  PromptRows rows;
  rows.tokens = *ids;
  std::vector<float> ref;
  ASSERT_TRUE(a->PromptRowLogits(rows, {}, [&](int64_t, std::span<const float> l) {
                 ref.insert(ref.end(), l.begin(), l.end());
                 return Status::Ok();
               }).ok());
  ASSERT_EQ(ref.size(), ids->size() * static_cast<size_t>(a->model().config().n_vocab));
  LogitComparison cmp;
  size_t next = 0;
  const size_t v = static_cast<size_t>(a->model().config().n_vocab);
  ASSERT_TRUE(b->PromptRowLogits(rows, {}, [&](int64_t, std::span<const float> l) {
                 const Status s = cmp.Add(std::span<const float>(ref).subspan(next, v), l);
                 next += v;
                 return s;
               }).ok());
  EXPECT_EQ(cmp.rows(), static_cast<int64_t>(ids->size()));
  EXPECT_LT(cmp.nmse(), 1e-9);
  EXPECT_EQ(cmp.top1_agreement(), 1.0);

  // Q4_0: the search keeps alpha 0 unless scaling lowers the weighted error, and here it does.
  auto q = gguf::QuantizeModel(path, dir + "/q4.gguf",
                               {.type = DType::kQ4_0, .awq = &stats}, &pool);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  double plain_err = 0.0, scaled_err = 0.0;
  for (const gguf::AwqGroup& g : q->awq_groups) {
    plain_err += g.error_plain;
    scaled_err += g.error_scaled;
  }
  EXPECT_LT(scaled_err, 0.8 * plain_err);

  // With an importance matrix too, a scaled matrix's rows are W s quantized weighted by
  // importance / s^2: the bytes of blk.0.attn_q, row by row.
  auto both = gguf::QuantizeModel(path, dir + "/q4-both.gguf",
                                  {.type = DType::kQ4_0, .imatrix = &stats, .awq = &stats}, &pool);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  const gguf::AwqGroup* attn = nullptr;
  for (const gguf::AwqGroup& g : both->awq_groups) {
    if (g.producer == "blk.0.attn_norm.weight") attn = &g;
  }
  ASSERT_NE(attn, nullptr);
  ASSERT_GT(attn->alpha, 0.0f);
  auto qf = gguf::GgufFile::Open(dir + "/q4-both.gguf");
  ASSERT_TRUE(qf.ok());
  const gguf::TensorInfo* w = (*src)->FindTensor("blk.0.attn_q.weight");
  const gguf::TensorInfo* wq = (*qf)->FindTensor("blk.0.attn_q.weight");
  const int64_t k = w->ne[0];
  std::vector<float> imp = stats.Importance("blk.0.attn_q.weight");
  for (int64_t j = 0; j < k; ++j) imp[j] /= attn->scales[j] * attn->scales[j];
  std::vector<float> row(static_cast<size_t>(k));
  const uint64_t qrow = *RowBytes(DType::kQ4_0, k);
  std::vector<uint8_t> want(qrow);
  for (int64_t r = 0; r < w->ne[1]; ++r) {
    ASSERT_TRUE(DequantizeRow(w->type, w->data + r * *RowBytes(w->type, k), row.data(), k).ok());
    for (int64_t j = 0; j < k; ++j) row[j] *= attn->scales[j];
    ASSERT_TRUE(QuantizeRowWeighted(DType::kQ4_0, row.data(), want.data(), k, imp.data()).ok());
    ASSERT_EQ(std::memcmp(wq->data + r * qrow, want.data(), qrow), 0) << "row " << r;
  }
  std::filesystem::remove_all(dir);
}

// PromptRowLogits in chunks of 4 rows over an image prompt: the wanted rows, in order, each equal
// to the last-row logits of the prompt cut after it (PromptLogits).
TEST(PromptRowLogitsTest, EachRowIsThePrefixsLastRow) {
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = 256;
  o.n_batch = 4;
  o.mmproj_path = vlmd::testing::FixturePath("tiny-smolvlm/mmproj.gguf");
  auto e = VlmEngine::Load(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"), o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::vector<uint8_t> png =
      vlmd::testing::ReadFileBytes(vlmd::testing::FixturePath("tiny-smolvlm/images/img-50x100.png"));
  auto img = (*e)->EncodeImage(png, nullptr);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  auto rows = (*e)->BuildPrompt("<__media__>\nWhat is this?", std::span(&*img, 1), false);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const int64_t n = static_cast<int64_t>(rows->tokens.size());
  int64_t first_image = 0;
  while (rows->tokens[first_image] >= 0) ++first_image;
  const std::vector<int64_t> want = {first_image - 1, first_image + 5, n - 1};
  std::vector<int64_t> got_rows;
  std::vector<std::vector<float>> got;
  ASSERT_TRUE((*e)->PromptRowLogits(*rows,
                   [&](int64_t r) { return std::find(want.begin(), want.end(), r) != want.end(); },
                   [&](int64_t r, std::span<const float> l) {
                     got_rows.push_back(r);
                     got.emplace_back(l.begin(), l.end());
                     return Status::Ok();
                   }).ok());
  ASSERT_EQ(got_rows, want);
  const int64_t d = (*e)->model().config().n_embd_inp();
  for (size_t i = 0; i < want.size(); ++i) {
    PromptRows prefix;
    prefix.tokens.assign(rows->tokens.begin(), rows->tokens.begin() + want[i] + 1);
    const int64_t images = std::count_if(prefix.tokens.begin(), prefix.tokens.end(),
                                         [](int32_t t) { return t < 0; });
    prefix.embeddings.assign(rows->embeddings.begin(), rows->embeddings.begin() + images * d);
    prefix.n_image_tokens = images;
    auto last = (*e)->PromptLogits(prefix);
    ASSERT_TRUE(last.ok()) << last.status().ToString();
    ASSERT_EQ(last->size(), got[i].size());
    for (size_t j = 0; j < last->size(); ++j) {
      ASSERT_NEAR(got[i][j], (*last)[j], 1e-4f * (1.0f + std::fabs((*last)[j]))) << "row " << want[i];
    }
  }
}

// vlmd-synth --outlier-channels: the same few channels of every layer's norms are scaled up, and
// as many rows of ffn_up; nothing else changes.
TEST(SynthOutliersTest, ScaleTheSameChannelsInEveryLayer) {
  const auto preset = synth::FindPreset("tiny");
  ASSERT_TRUE(preset.has_value());
  const std::string dir = std::filesystem::temp_directory_path().string() + "/vlmd-outliers-" +
                          std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  synth::SynthOptions plain, outliers;
  outliers.outlier_channels = 3;
  outliers.outlier_scale = 20.0f;
  ASSERT_TRUE(synth::WriteSyntheticText(*preset, plain, dir + "/plain.gguf").ok());
  ASSERT_TRUE(synth::WriteSyntheticText(*preset, outliers, dir + "/outliers.gguf").ok());
  auto a = gguf::GgufFile::Open(dir + "/plain.gguf");
  auto b = gguf::GgufFile::Open(dir + "/outliers.gguf");
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int64_t> first_layer_channels;
  for (int l = 0; l < preset->text.n_layers; ++l) {
    for (const char* norm : {"attn_norm", "ffn_norm"}) {
      const std::string name = "blk." + std::to_string(l) + "." + norm + ".weight";
      const std::vector<float> x = ReadF32(**a, name), y = ReadF32(**b, name);
      std::vector<int64_t> scaled;
      for (size_t i = 0; i < x.size(); ++i) {
        if (y[i] != x[i]) {
          EXPECT_FLOAT_EQ(y[i], 20.0f * x[i]) << name << " " << i;
          scaled.push_back(static_cast<int64_t>(i));
        }
      }
      EXPECT_EQ(scaled.size(), 3u) << name;
      if (first_layer_channels.empty()) first_layer_channels = scaled;
      EXPECT_EQ(scaled, first_layer_channels) << name;
    }
    const std::string up = "blk." + std::to_string(l) + ".ffn_up.weight";
    const gguf::TensorInfo* ua = (*a)->FindTensor(up);
    const gguf::TensorInfo* ub = (*b)->FindTensor(up);
    const uint64_t row = *RowBytes(ua->type, ua->ne[0]);
    int differing_rows = 0;
    for (int64_t r = 0; r < ua->ne[1]; ++r) {
      differing_rows += std::memcmp(ua->data + r * row, ub->data + r * row, row) != 0;
    }
    EXPECT_EQ(differing_rows, 3) << up;
    const std::string down = "blk." + std::to_string(l) + ".ffn_down.weight";
    EXPECT_EQ(std::memcmp((*a)->FindTensor(down)->data, (*b)->FindTensor(down)->data,
                          (*a)->FindTensor(down)->nbytes), 0) << down;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vlmd::engine::runtime
