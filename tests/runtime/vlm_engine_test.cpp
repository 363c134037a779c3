// VlmEngine on the parity fixture: prompt logits equal the model's, stop strings cut the text,
// budgets and bad input give errors, and the stream callback sees exactly the returned text.
#include "engine/runtime/vlm_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/gguf/gguf_reader.h"
#include "engine/kernels/kernel_table.h"
#include "engine/tokenizer/unicode.h"
#include "test_util.h"

namespace vlmd::engine::runtime {
namespace {

class VlmEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.threads = 2;
    o.n_ctx = 128;
    auto e = VlmEngine::Load(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"), o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
    auto ids = engine_->tokenizer().Tokenize("<|im_start|>User: hello<end_of_utterance>\nAssistant:",
                                             true, true);
    ASSERT_TRUE(ids.ok());
    prompt_ = *ids;
  }
  // Feeds `seq` logits that make `id` the token it samples.
  void Force(Sequence& seq, int32_t id) {
    std::vector<float> logits(static_cast<size_t>(engine_->model().config().n_vocab), 0.0f);
    logits[static_cast<size_t>(id)] = 100.0f;
    seq.Accept(logits);
  }
  std::unique_ptr<VlmEngine> engine_;
  std::vector<int32_t> prompt_;
};

TEST_F(VlmEngineTest, StreamedTextEqualsResultAndStopStringCuts) {
  GenerateParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  std::string streamed;
  auto full = engine_->Generate(prompt_, p, [&](std::string_view s) {
    streamed += s;
    return true;
  });
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(streamed, full->text);
  EXPECT_EQ(full->tokens.size(), 12u);
  EXPECT_EQ(full->finish_reason, "length");
  ASSERT_GE(full->text.size(), 6u);

  // A stop string taken from the middle of the greedy text ends generation right before it.
  const std::string stop = full->text.substr(3, 3);
  p.stop = {stop};
  std::string streamed2;
  auto cut = engine_->Generate(prompt_, p, [&](std::string_view s) {
    streamed2 += s;
    return true;
  });
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->finish_reason, "stop");
  EXPECT_EQ(cut->text, full->text.substr(0, full->text.find(stop)));
  EXPECT_EQ(streamed2, cut->text);
}

// The tokens the text holds (what logprobs list): all of them without a stop string; with one,
// those that began before the cut: a token that starts the stop string, and those after it, are
// left out, one that holds text before the stop string stays.
TEST_F(VlmEngineTest, TextTokensLeaveOutTheStopStringsTokens) {
  GenerateParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.token_stats = true;
  auto full = engine_->Generate(prompt_, p, nullptr);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->text_tokens, full->tokens.size());
  std::vector<std::string> pieces;
  std::vector<size_t> starts;
  std::string joined;
  for (int32_t t : full->tokens) {
    starts.push_back(joined.size());
    pieces.emplace_back(engine_->tokenizer().TokenToPiece(t, false));
    joined += pieces.back();
  }
  ASSERT_EQ(joined, full->text);
  // A stop string that begins exactly where token j begins (its piece and the next one's first
  // byte), and one that begins inside token j (its piece without the first byte, and more).
  bool tested_start = false, tested_inside = false;
  for (size_t j = 1; j + 1 < pieces.size(); ++j) {
    if (pieces[j].size() < 2 || pieces[j + 1].empty()) continue;
    const std::string at_start = pieces[j] + pieces[j + 1].substr(0, 1);
    const std::string inside = pieces[j].substr(1) + pieces[j + 1].substr(0, 1);
    for (const std::string& stop : {at_start, inside}) {
      const size_t first = joined.find(stop);
      const bool starts_token = stop == at_start;
      if (first != starts[j] + (starts_token ? 0 : 1)) continue;
      if (!tokenizer::IsValidUtf8(stop)) continue;  // refused (a stop string is text)
      p.stop = {stop};
      auto cut = engine_->Generate(prompt_, p, nullptr);
      ASSERT_TRUE(cut.ok()) << cut.status().ToString();
      ASSERT_EQ(cut->text, joined.substr(0, first)) << stop;
      EXPECT_EQ(cut->text_tokens, starts_token ? j : j + 1) << "stop '" << stop << "'";
      EXPECT_GT(cut->tokens.size(), cut->text_tokens);
      (starts_token ? tested_start : tested_inside) = true;
    }
  }
  EXPECT_TRUE(tested_start && tested_inside) << "no token fit the cases: " << joined;
}

// Several stop strings: the text ends at the earliest match in it, whatever their order (each
// cut in list order missed a match overlapping an earlier cut).
TEST_F(VlmEngineTest, TheEarliestStopStringEndsTheText) {
  GenerateParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  auto full = engine_->Generate(prompt_, p);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ASSERT_GE(full->text.size(), 8u);
  const std::string later = full->text.substr(4, 3), earlier = full->text.substr(2, 3);
  const size_t end = std::min(full->text.find(later), full->text.find(earlier));
  for (const auto& stops : {std::vector<std::string>{later, earlier}, std::vector<std::string>{earlier, later}}) {
    p.stop = stops;
    auto cut = engine_->Generate(prompt_, p);
    ASSERT_TRUE(cut.ok());
    EXPECT_EQ(cut->finish_reason, "stop");
    EXPECT_EQ(cut->text, full->text.substr(0, end)) << stops[0] << " | " << stops[1];
  }
}

// Text held back because it could begin a stop string is text when the sequence ends at an
// end-of-generation token (it was dropped): the logits are forced, token by token.
TEST_F(VlmEngineTest, TextHeldForAStopStringIsKeptAtEndOfGeneration) {
  const auto& tok = engine_->tokenizer();
  auto hello = tok.Tokenize("hello", false, false);
  ASSERT_TRUE(hello.ok() && !hello->empty());
  GenerateParams p;
  p.max_tokens = 10;
  p.stop = {"hello world, never"};
  PromptRows rows;
  rows.tokens = prompt_;
  auto seq = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  auto force = [&](int32_t id) { Force(**seq, id); };
  for (int32_t id : *hello) force(id);
  EXPECT_EQ((*seq)->text(), "") << "held: it begins the stop string";
  EXPECT_EQ((*seq)->released_tokens(), 0u) << "their text is held: a stream lists none yet";
  force(tok.eos());
  EXPECT_EQ((*seq)->finish_reason(), "stop");
  EXPECT_EQ((*seq)->text(), "hello");
  // The end-of-generation token spells no text: logprobs do not list it (it was an empty entry).
  EXPECT_EQ((*seq)->tokens().size(), hello->size() + 1);
  EXPECT_EQ((*seq)->text_tokens(), hello->size());
  EXPECT_EQ((*seq)->released_tokens(), hello->size());
}

// released_tokens (what a stream lists logprobs for) follows the released text: a token counts
// once its whole text is out, never before.
TEST_F(VlmEngineTest, ReleasedTokensFollowTheReleasedText) {
  const auto& tok = engine_->tokenizer();
  auto words = tok.Tokenize("one two three", false, false);
  ASSERT_TRUE(words.ok() && words->size() >= 3);
  GenerateParams p;
  p.max_tokens = 20;
  p.stop = {"xyzzy"};  // nothing here begins it, but "x" would
  PromptRows rows;
  rows.tokens = prompt_;
  auto seq = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  auto force = [&](int32_t id) { Force(**seq, id); };
  for (size_t i = 0; i < words->size(); ++i) {
    force((*words)[i]);
    EXPECT_EQ((*seq)->released_tokens(), i + 1) << "every piece is out at once";
  }
  auto x = tok.Tokenize("x", false, false);
  ASSERT_TRUE(x.ok() && x->size() == 1);
  force((*x)[0]);
  EXPECT_EQ((*seq)->released_tokens(), words->size()) << "'x' may begin the stop string: held";
  force((*words)[0]);
  EXPECT_EQ((*seq)->released_tokens(), words->size() + 2) << "'x' was not the stop string";
}

// A token whose bytes end inside a UTF-8 character is released with the token that completes it;
// a sequence that fails drops its held text, and the tokens that spelled it are not released.
TEST_F(VlmEngineTest, ReleasedTokensWaitForWholeCharactersAndFailureDropsHeldOnes) {
  const auto& tok = engine_->tokenizer();
  auto euro = tok.Tokenize("\xE2\x82\xAC", false, false);  // the byte-level vocabulary splits it
  ASSERT_TRUE(euro.ok() && euro->size() >= 2) << "the fixture's vocabulary no longer splits the character";
  GenerateParams p;
  p.max_tokens = 20;
  PromptRows rows;
  rows.tokens = prompt_;
  auto seq = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  for (size_t i = 0; i + 1 < euro->size(); ++i) {
    Force(**seq, (*euro)[i]);
    EXPECT_EQ((*seq)->released_tokens(), 0u) << "a part of a character";
  }
  Force(**seq, euro->back());
  EXPECT_EQ((*seq)->text(), "\xE2\x82\xAC");
  EXPECT_EQ((*seq)->released_tokens(), euro->size());

  // Split over three tokens, one byte each: the first two start where the third does.
  auto byte_token = [&](char byte) {
    for (int32_t id = 0; id < engine_->model().config().n_vocab; ++id) {
      if (tok.TokenToPiece(id, false) == std::string(1, byte)) return id;
    }
    return int32_t{-1};
  };
  const int32_t b0 = byte_token('\xE2'), b1 = byte_token('\x82'), b2 = byte_token('\xAC');
  ASSERT_GE(std::min({b0, b1, b2}), 0) << "the fixture's vocabulary has no token per byte";
  auto bytes = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(bytes.ok());
  Force(**bytes, b0);
  Force(**bytes, b1);
  EXPECT_EQ((*bytes)->released_tokens(), 0u) << "two bytes of three: nothing is out";
  Force(**bytes, b2);
  EXPECT_EQ((*bytes)->released_tokens(), 3u);

  // A split character held as a stop string's start: none of its tokens is out, and when the
  // stop string completes, none of them is the text's (the stream must not have listed one).
  p.stop = {"\xE2\x82\xAC!"};
  auto stopped = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(stopped.ok());
  for (int32_t id : *euro) Force(**stopped, id);
  EXPECT_EQ((*stopped)->released_tokens(), 0u) << "held as the stop string's start";
  auto bang = tok.Tokenize("!", false, false);
  ASSERT_TRUE(bang.ok() && bang->size() == 1);
  Force(**stopped, bang->front());
  EXPECT_EQ((*stopped)->finish_reason(), "stop");
  EXPECT_EQ((*stopped)->text_tokens(), 0u);
  EXPECT_EQ((*stopped)->released_tokens(), 0u);

  auto say = tok.Tokenize("say", false, false), hello = tok.Tokenize(" hello", false, false);
  ASSERT_TRUE(say.ok() && hello.ok());
  p.stop = {" hello world"};
  auto failing = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(failing.ok());
  for (int32_t id : *say) Force(**failing, id);
  for (int32_t id : *hello) Force(**failing, id);
  EXPECT_EQ((*failing)->released_tokens(), say->size()) << "' hello' is held: it begins the stop string";
  (*failing)->Fail(InternalError("the step failed"));
  EXPECT_EQ((*failing)->text(), "say");
  EXPECT_EQ((*failing)->released_tokens(), say->size()) << "the held tokens were dropped, not released";
}

// A sequence ended while its prompt is being prefilled (the client left, the deadline passed)
// lets go of the prompt's rows, image embeddings included: the scheduler parks it for prefix
// reuse with only its K/V, and the rows would stay with it unseen by any memory count.
TEST_F(VlmEngineTest, SequenceEndedWhilePrefillingLetsGoOfItsPromptRows) {
  ASSERT_GE(prompt_.size(), 3u);
  GenerateParams p;
  p.max_tokens = 4;
  PromptRows rows;
  rows.tokens = prompt_;
  auto seq = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  ASSERT_TRUE(engine_->PrefillChunk(seq->get(), 2).ok());
  ASSERT_TRUE((*seq)->prefilling());
  EXPECT_EQ((*seq)->prefill_rows_left(), static_cast<int64_t>(prompt_.size()) - 2);
  (*seq)->Finish("cancelled");
  EXPECT_FALSE((*seq)->prefilling()) << "the prompt rows are still held";
  EXPECT_EQ((*seq)->prefill_rows_left(), 0);
  EXPECT_EQ((*seq)->cache()->n_filled(), 2) << "the rows computed stay reusable";
  EXPECT_TRUE(engine_->PrefillChunk(seq->get(), 2).ok()) << "nothing left to do: not an error";
  EXPECT_EQ((*seq)->cache()->n_filled(), 2);

  // max_tokens 0 (library callers; the API asks for at least 1): finished at once, nothing held.
  p.max_tokens = 0;
  auto none = engine_->BeginSequence(rows, p);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ((*none)->finish_reason(), "length");
  EXPECT_FALSE((*none)->prefilling());
  auto generated = engine_->Generate(prompt_, p);
  ASSERT_TRUE(generated.ok()) << generated.status().ToString();
  EXPECT_EQ(generated->text, "");
  EXPECT_EQ(generated->finish_reason, "length");
}

TEST_F(VlmEngineTest, CallbackCancels) {
  GenerateParams p;
  p.max_tokens = 20;
  p.ignore_eos = true;
  int calls = 0;
  auto r = engine_->Generate(prompt_, p, [&](std::string_view) { return ++calls < 2; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_LT(r->tokens.size(), 20u);
}

TEST_F(VlmEngineTest, RejectsOverBudgetEmptyAndBadIds) {
  GenerateParams p;
  p.max_tokens = 200;  // prompt + 200 > n_ctx 128
  auto over = engine_->Generate(prompt_, p);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(engine_->Generate(std::span<const int32_t>(), GenerateParams{}).ok());
  const std::vector<int32_t> bad = {1, 999999};
  GenerateParams small;
  small.max_tokens = 4;
  auto r = engine_->Generate(bad, small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // Stop strings: an empty one would match at once, one that is not UTF-8 could cut a character
  // (vlmd-run's --stop takes the command line's bytes as they are).
  for (const std::string stop : {std::string(), std::string("a\xC3"), std::string("\xFF")}) {
    small.stop = {"fine", stop};
    auto refused = engine_->Generate(prompt_, small);
    ASSERT_FALSE(refused.ok()) << stop;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
  }
  small.stop = {"fine", "\xC3\xA9t\xC3\xA9"};
  EXPECT_TRUE(engine_->Generate(prompt_, small).ok());
}

TEST_F(VlmEngineTest, TokenStatsWhenAsked) {
  GenerateParams p;
  p.max_tokens = 4;
  p.ignore_eos = true;
  p.token_stats = true;
  auto r = engine_->Generate(prompt_, p);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->token_stats.size(), 4u);
  for (const auto& s : r->token_stats) {
    EXPECT_LE(s.logprob, 0.0f);
    EXPECT_GE(s.entropy_bits, 0.0f);
  }
}

// In the fast precision with a bf16 attention kernel (x86 from AVX2 up) a prompt's attention
// runs on it whatever the chunk size (models::ForwardBatch::prompt), and its products on the
// tile unit (AMX) or the int8 kernel, so the prompt's last logits are the same bits
// whether it goes through in one call of 60 rows or in calls of 7 (and of 1). Without that
// kernel the chunk sizes pick different attention paths (streaming below 16 rows, blocked
// above), whose sums differ in rounding, so there is nothing bitwise to check. Gemma 3's
// sliding-window layers (window 12) take the same kernel with a key range per row: in one call
// their rings hold the whole prompt, in calls of 7 or 1 they wrap (rings of 19 and 13 rows).
TEST(VlmEngineChunking, FastPromptLogitsDoNotDependOnChunking) {
  const auto isa = kernels::SelectIsa();
  ASSERT_TRUE(isa.ok());
  const kernels::KernelTable& kt = kernels::GetKernelTable(*isa);
  if (kt.tile_attention == nullptr) GTEST_SKIP() << "no bf16 attention kernel on this CPU";
  for (const char* fixture : {"tiny-smolvlm", "tiny-gemma3"}) {
    std::vector<float> want;
    for (int32_t n_batch : {512, 7, 1}) {
      EngineOptions o;
      o.threads = 2;
      o.n_ctx = 128;
      o.n_batch = n_batch;
      o.precision = ops::Precision::kFast;
      auto e = VlmEngine::Load(vlmd::testing::FixturePath(std::string(fixture) + "/text.gguf"), o);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      std::vector<int32_t> prompt;
      for (int i = 0; i < 60; ++i) prompt.push_back(1 + (i * 37) % 200);
      auto logits = (*e)->PromptLogits(prompt);
      ASSERT_TRUE(logits.ok()) << logits.status().ToString();
      if (want.empty()) {
        want = *logits;
        continue;
      }
      ASSERT_EQ(logits->size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ((*logits)[i], want[i]) << fixture << " n_batch " << n_batch << ", logit " << i;
      }
    }
  }
}


// A float weight holding an inf (a broken or hostile file): the fast precision's load-time int8
// packing refuses it naming the GGUF tensor and its row, also when it is packed fused with
// others (q, k and v as one matrix); exact precision keeps the weights as they are and loads.
TEST(VlmEngineLoad, FastPrecisionNamesTheTensorOfANonFiniteWeight) {
  const auto isa = kernels::SelectIsa();
  ASSERT_TRUE(isa.ok());
  if (kernels::GetKernelTable(*isa).packed_matmul == nullptr) {
    GTEST_SKIP() << "no packed int8 matmul on this CPU: nothing is packed";
  }
  const std::string path = std::filesystem::temp_directory_path().string() + "/vlmd-inf-" +
                           std::to_string(::getpid()) + ".gguf";
  std::vector<uint8_t> bytes =
      vlmd::testing::ReadFileBytes(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"));
  {
    auto f = gguf::GgufFile::Open(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const gguf::TensorInfo* t = (*f)->FindTensor("blk.1.attn_k.weight");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->type, DType::kF16);
    const size_t at = (*f)->data_offset() + t->offset + (2 * t->ne[0] + 5) * sizeof(uint16_t);
    bytes[at] = 0x00;  // f16 +inf, little-endian, at row 2
    bytes[at + 1] = 0x7C;
  }
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EngineOptions o;
  o.threads = 2;
  o.n_ctx = 64;
  o.precision = ops::Precision::kFast;
  auto fast = VlmEngine::Load(path, o);
  ASSERT_FALSE(fast.ok());
  EXPECT_EQ(fast.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fast.status().message().find("tensor 'blk.1.attn_k.weight' row 2"), std::string::npos)
      << fast.status().message();
  o.precision = ops::Precision::kExact;
  EXPECT_TRUE(VlmEngine::Load(path, o).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace vlmd::engine::runtime
