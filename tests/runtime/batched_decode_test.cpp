// Continuous batching: sequences decoded together in one forward pass per step, joining and
// leaving at different steps, produce exactly the tokens each produces alone (greedy).
#include <gtest/gtest.h>

#include "engine/runtime/vlm_engine.h"
#include "test_util.h"

namespace vlmd::engine::runtime {
namespace {

// The tiny SmolVLM fixture's text model on 2 threads.
Result<std::unique_ptr<VlmEngine>> LoadTinyEngine(int32_t n_ctx) {
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = n_ctx;
  return VlmEngine::Load(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"), o);
}

TEST(BatchedDecodeTest, JoinAndLeaveGivesSameTokensAsAlone) {
  auto e = LoadTinyEngine(128);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  VlmEngine& engine = **e;
  const char* texts[] = {"hello there", "a cat sat on the", "1 2 3 4 5 6 7"};
  const int32_t max_tokens[] = {9, 5, 12};
  std::vector<PromptRows> prompts(3);
  std::vector<std::vector<int32_t>> alone(3);
  for (int i = 0; i < 3; ++i) {
    auto ids = engine.tokenizer().Tokenize(texts[i], true, true);
    ASSERT_TRUE(ids.ok());
    prompts[i].tokens = *ids;
    GenerateParams p;
    p.max_tokens = max_tokens[i];
    p.ignore_eos = true;
    auto r = engine.Generate(prompts[i], p);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(static_cast<int32_t>(r->tokens.size()), max_tokens[i]);
    alone[i] = r->tokens;
  }
  // Sequence 0 starts, 1 joins after 2 steps, 2 joins after 4; 1 leaves first (shortest).
  // Sequence 2 is prefilled in chunks of 2 rows between steps (the scheduler's chunked
  // prefill): DecodeStep must pass over it until its prompt is in.
  std::vector<std::unique_ptr<Sequence>> seqs(3);
  const int join_step[] = {0, 2, 4};
  int prefill_steps = 0;
  for (int step = 0; step < 40; ++step) {
    for (int i = 0; i < 3; ++i) {
      if (join_step[i] == step) {
        GenerateParams p;
        p.max_tokens = max_tokens[i];
        p.ignore_eos = true;
        auto s = i == 2 ? engine.BeginSequence(prompts[i], p) : engine.StartSequence(prompts[i], p);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        seqs[i] = std::move(*s);
      }
    }
    if (seqs[2] && seqs[2]->prefilling()) {
      EXPECT_TRUE(seqs[2]->tokens().empty());
      ASSERT_TRUE(engine.PrefillChunk(seqs[2].get(), 2).ok());
      ++prefill_steps;
    }
    std::vector<Sequence*> batch;
    for (auto& s : seqs) batch.push_back(s.get());
    ASSERT_TRUE(engine.DecodeStep(batch).ok());
  }
  EXPECT_EQ(prefill_steps, static_cast<int>((prompts[2].tokens.size() + 1) / 2));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(seqs[i]->finished());
    EXPECT_EQ(seqs[i]->finish_reason(), "length");
    EXPECT_EQ(seqs[i]->tokens(), alone[i]) << "sequence " << i;
  }
}

// SPEC E7 in a batch: a sequence whose numbers go bad ends with an error, and the sequences
// decoded in the same steps go on exactly as alone.
TEST(BatchedDecodeTest, ANonFiniteSequenceFailsAloneItsNeighboursContinue) {
  auto e = LoadTinyEngine(64);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  VlmEngine& engine = **e;
  PromptRows prompt;
  prompt.tokens = *engine.tokenizer().Tokenize("a cat sat on the", true, true);
  GenerateParams p;
  p.max_tokens = 6;
  p.ignore_eos = true;
  auto alone = engine.Generate(prompt, p);
  ASSERT_TRUE(alone.ok());
  auto good = engine.StartSequence(prompt, p);
  auto bad = engine.StartSequence(prompt, p);
  ASSERT_TRUE(good.ok() && bad.ok());
  // Poison the bad sequence's cached values: +Inf (F16 0x7C00) in every V row of layer 0, so its
  // attention output (and then its logits) cannot be finite.
  models::KvCache* cache = (*bad)->cache();
  std::fill_n(cache->v(0), size_t(cache->n_filled()) * cache->kv_dim(), uint16_t{0x7C00});
  Sequence* batch[] = {good->get(), bad->get()};
  for (int step = 0; step < 8; ++step) ASSERT_TRUE(engine.DecodeStep(batch).ok());
  EXPECT_EQ((*bad)->finish_reason(), "error");
  EXPECT_EQ((*bad)->error().code(), StatusCode::kInternal);
  EXPECT_NE((*bad)->error().message().find("logits"), std::string::npos);
  EXPECT_EQ((*good)->finish_reason(), "length");
  EXPECT_EQ((*good)->tokens(), alone->tokens);
}

}  // namespace
}  // namespace vlmd::engine::runtime
