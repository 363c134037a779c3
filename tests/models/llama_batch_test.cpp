// Batched forward: several sequences in one Forward call (the server's continuous-batching shape)
// give the same logits as running each sequence alone, and malformed batches are refused.
#include <gtest/gtest.h>

#include <memory>

#include "engine/gguf/gguf_reader.h"
#include "engine/models/text_decoder.h"
#include "test_util.h"

namespace vlmd::engine::models {
namespace {

class LlamaBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = gguf::GgufFile::Open(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto m = TextDecoder::Load(std::shared_ptr<const gguf::GgufFile>(std::move(*file)));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    auto isa = kernels::SelectIsa();
    ASSERT_TRUE(isa.ok());
    ctx_.kernels = &kernels::GetKernelTable(*isa);
    pool_ = std::make_unique<ThreadPool>(2);
    ctx_.pool = pool_.get();
  }

  // Prefills `tokens` alone into `cache`; returns the last position's logits.
  std::vector<float> Solo(const std::vector<int32_t>& tokens, KvCache* cache) {
    std::vector<int32_t> pos(tokens.size()), seq(tokens.size(), 0);
    for (size_t i = 0; i < tokens.size(); ++i) pos[i] = static_cast<int32_t>(i);
    const int32_t last = static_cast<int32_t>(tokens.size() - 1);
    ForwardBatch b{static_cast<int64_t>(tokens.size()), tokens.data(), nullptr, pos.data(),
                   seq.data(), &last, 1};
    std::vector<float> logits(model_->config().n_vocab);
    KvCache* caches[] = {cache};
    Status s = model_->Forward(b, caches, &ctx_, logits.data());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }

  std::unique_ptr<TextDecoder> model_;
  ForwardContext ctx_;
  std::unique_ptr<ThreadPool> pool_;
};

TEST_F(LlamaBatchTest, TwoSequencesInOneStepMatchSoloRuns) {
  const std::vector<int32_t> a = {1, 100, 200, 300, 400};
  const std::vector<int32_t> b = {1, 5000, 6000};
  auto ca = model_->NewCache(64), cb = model_->NewCache(64);
  const std::vector<float> la = Solo(a, ca.get());
  const std::vector<float> lb = Solo(b, cb.get());

  // Both prompts in one call: rows of seq 0, then rows of seq 1; logits of both last rows.
  auto ba = model_->NewCache(64), bb = model_->NewCache(64);
  std::vector<int32_t> tokens = a, pos, seq;
  tokens.insert(tokens.end(), b.begin(), b.end());
  for (size_t i = 0; i < a.size(); ++i) { pos.push_back(static_cast<int32_t>(i)); seq.push_back(0); }
  for (size_t i = 0; i < b.size(); ++i) { pos.push_back(static_cast<int32_t>(i)); seq.push_back(1); }
  const int32_t rows[] = {static_cast<int32_t>(a.size() - 1), static_cast<int32_t>(tokens.size() - 1)};
  ForwardBatch batch{static_cast<int64_t>(tokens.size()), tokens.data(), nullptr, pos.data(),
                     seq.data(), rows, 2};
  const int64_t nv = model_->config().n_vocab;
  std::vector<float> logits(2 * nv);
  KvCache* caches[] = {ba.get(), bb.get()};
  ASSERT_TRUE(model_->Forward(batch, caches, &ctx_, logits.data()).ok());
  const std::vector<float> got_a(logits.begin(), logits.begin() + nv);
  const std::vector<float> got_b(logits.begin() + nv, logits.end());
  // Batching changes only how rows are grouped into matmul tiles, i.e. the f32 summation order
  // (~1e-7 relative per dot); with F16 weights the activations are rounded to F16 before every
  // matmul (as llama.cpp does), and such a tiny difference can flip one rounding (2^-11), so the
  // bound is 1e-6: 10x below the parity tolerance, and far below what a mixed-up row gives (~1).
  constexpr double kBound = 1e-6;
  EXPECT_LT(vlmd::testing::Nmse(got_a, la), kBound);
  EXPECT_LT(vlmd::testing::Nmse(got_b, lb), kBound);

  // One decode step for both sequences at different positions, in one call.
  const int32_t next[] = {42, 43};
  const int32_t next_pos[] = {static_cast<int32_t>(a.size()), static_cast<int32_t>(b.size())};
  const int32_t next_seq[] = {0, 1};
  const int32_t next_rows[] = {0, 1};
  ForwardBatch step{2, next, nullptr, next_pos, next_seq, next_rows, 2};
  ASSERT_TRUE(model_->Forward(step, caches, &ctx_, logits.data()).ok());
  std::vector<float> solo(nv);
  ForwardBatch sa{1, &next[0], nullptr, &next_pos[0], &next_seq[0], &next_rows[0], 1};
  KvCache* only_a[] = {ca.get()};
  ASSERT_TRUE(model_->Forward(sa, only_a, &ctx_, solo.data()).ok());
  EXPECT_LT(vlmd::testing::Nmse(std::vector<float>(logits.begin(), logits.begin() + nv), solo), kBound);
  EXPECT_EQ(ba->n_filled(), static_cast<int32_t>(a.size() + 1));
  EXPECT_EQ(bb->n_filled(), static_cast<int32_t>(b.size() + 1));
}

// A bidirectional span (Gemma 3's image rows): its rows see each other in both directions, the
// rows around it stay causal. Checked by logits: row 2 of a span [1, 4) changes when the token
// of row 3 does (it cannot under the causal mask); the row before the span does not change.
TEST_F(LlamaBatchTest, BidirectionalSpanSeesItsLaterRows) {
  const int64_t nv = model_->config().n_vocab;
  auto run = [&](const std::vector<int32_t>& tokens, bool span) {
    std::vector<int32_t> pos(tokens.size()), seq(tokens.size(), 0);
    for (size_t i = 0; i < tokens.size(); ++i) pos[i] = static_cast<int32_t>(i);
    const int32_t rows[] = {0, 2, 3, 5};
    const ops::RowSpan spans[] = {{1, 3}};
    ForwardBatch b{static_cast<int64_t>(tokens.size()), tokens.data(), nullptr, pos.data(),
                   seq.data(), rows, 4};
    if (span) b.bidirectional = spans;
    auto cache = model_->NewCache(16);
    KvCache* caches[] = {cache.get()};
    std::vector<float> logits(4 * nv);
    Status s = model_->Forward(b, caches, &ctx_, logits.data());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  };
  auto row = [&](const std::vector<float>& l, int i) {
    return std::vector<float>(l.begin() + i * nv, l.begin() + (i + 1) * nv);
  };
  const std::vector<int32_t> t1 = {1, 100, 200, 300, 400, 500};
  std::vector<int32_t> t2 = t1;
  t2[3] = 4321;  // the span's last row
  const std::vector<float> causal = run(t1, false), span1 = run(t1, true), span2 = run(t2, true);
  const std::vector<float> causal2 = run(t2, false);
  EXPECT_EQ(row(span1, 0), row(causal, 0));           // before the span: untouched
  EXPECT_EQ(row(causal2, 1), row(causal, 1));         // causal row 2 cannot see row 3...
  EXPECT_GT(vlmd::testing::Nmse(row(span2, 1), row(span1, 1)), 1e-4);  // ...the span's can
  EXPECT_GT(vlmd::testing::Nmse(row(span1, 1), row(causal, 1)), 1e-4);
}

TEST_F(LlamaBatchTest, RefusesMalformedBatches) {
  auto cache = model_->NewCache(8);
  KvCache* caches[] = {cache.get()};
  std::vector<float> logits(model_->config().n_vocab);
  const int32_t tok = 1, seq = 0, row = 0;
  const int32_t hole = 3;  // cache is empty: position 3 leaves a hole
  ForwardBatch b1{1, &tok, nullptr, &hole, &seq, &row, 1};
  EXPECT_EQ(model_->Forward(b1, caches, &ctx_, logits.data()).code(), StatusCode::kInvalidArgument);
  const int32_t bad_seq = 5, zero = 0;
  ForwardBatch b2{1, &tok, nullptr, &zero, &bad_seq, &row, 1};
  EXPECT_EQ(model_->Forward(b2, caches, &ctx_, logits.data()).code(), StatusCode::kInvalidArgument);
  const int32_t bad_tok = 1 << 30;
  ForwardBatch b3{1, &bad_tok, nullptr, &zero, &seq, &row, 1};
  EXPECT_EQ(model_->Forward(b3, caches, &ctx_, logits.data()).code(), StatusCode::kInvalidArgument);
  // A full context is RESOURCE_EXHAUSTED, not a write past the cache.
  std::vector<int32_t> toks(9, 1), pos(9), seqs(9, 0);
  for (int i = 0; i < 9; ++i) pos[i] = i;
  const int32_t last = 8;
  ForwardBatch b4{9, toks.data(), nullptr, pos.data(), seqs.data(), &last, 1};
  EXPECT_EQ(model_->Forward(b4, caches, &ctx_, logits.data()).code(),
            StatusCode::kResourceExhausted);
  // Bidirectional spans outside the batch, or across two sequences.
  auto other = model_->NewCache(8);
  KvCache* two[] = {cache.get(), other.get()};
  const int32_t toks2[] = {1, 2, 3, 4}, pos2[] = {0, 1, 0, 1}, seq2[] = {0, 0, 1, 1};
  const int32_t last2 = 3;
  for (ops::RowSpan bad : {ops::RowSpan{2, 3}, ops::RowSpan{1, 2}, ops::RowSpan{-1, 2},
                           ops::RowSpan{0, 0}}) {
    ForwardBatch b5{4, toks2, nullptr, pos2, seq2, &last2, 1};
    b5.bidirectional = std::span<const ops::RowSpan>(&bad, 1);
    EXPECT_EQ(model_->Forward(b5, two, &ctx_, logits.data()).code(), StatusCode::kInvalidArgument)
        << bad.start << " +" << bad.len;
  }
}

}  // namespace
}  // namespace vlmd::engine::models

namespace vlmd::engine::models {
namespace {

// Gemma 3's ring caches: a call may not add more rows than the ring's margin, and may not restart
// a sequence below its filled positions (a ring row would then be read as the wrong position).
TEST(SlidingWindowRingForward, RefusesCallsTheRingsCannotHold) {
  auto file = gguf::GgufFile::Open(vlmd::testing::FixturePath("tiny-gemma3/text.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto m = TextDecoder::Load(std::shared_ptr<const gguf::GgufFile>(std::move(*file)));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ForwardContext ctx;
  auto isa = kernels::SelectIsa();
  ASSERT_TRUE(isa.ok());
  ctx.kernels = &kernels::GetKernelTable(*isa);
  auto cache = (*m)->NewCache(64, /*max_batch_rows=*/4);  // window 12: rings of 16 rows
  ASSERT_TRUE(cache->ring(0));
  KvCache* caches[] = {cache.get()};
  std::vector<float> logits((*m)->config().n_vocab);
  auto run = [&](int32_t first_slot, int32_t n) {
    std::vector<int32_t> tokens(static_cast<size_t>(n), 5), slot(static_cast<size_t>(n)), seq(static_cast<size_t>(n), 0);
    for (int32_t i = 0; i < n; ++i) slot[static_cast<size_t>(i)] = first_slot + i;
    const int32_t last = n - 1;
    ForwardBatch b{n, tokens.data(), nullptr, slot.data(), seq.data(), &last, 1};
    return (*m)->Forward(b, caches, &ctx, logits.data());
  };
  EXPECT_TRUE(run(0, 4).ok());
  EXPECT_TRUE(run(4, 4).ok());
  const Status too_many = run(8, 6);  // 6 rows + window 12 > 16 ring rows
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument) << too_many.ToString();
  const Status restart = run(2, 2);   // below the 8 filled positions
  EXPECT_EQ(restart.code(), StatusCode::kInvalidArgument) << restart.ToString();
  EXPECT_TRUE(run(8, 4).ok());
}

}  // namespace
}  // namespace vlmd::engine::models
