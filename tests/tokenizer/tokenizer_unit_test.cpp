// Merge order, byte fallback, special-token parsing, BOS/EOS and pieces on small hand-made
// vocabularies whose correct output can be worked out by hand.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace vlmd::engine::tokenizer {
namespace {

using test::Build;
using test::Ids;
using test::MakeBpeVocab;
using test::MakeSpmVocab;

constexpr TokenId kFirstExtra = 256;  // MakeBpeVocab: first token after the byte alphabet

TEST(BpeTest, MergeRanksDecideTheSegmentation) {
  // "the": with "h e" ranked first the result is t + he; with "t h" first it is th + e.
  const Tokenizer he_first = Build(MakeBpeVocab({"th", "he"}, {"h e", "t h"}));
  EXPECT_EQ(Ids(he_first, "the", false, false),
            (std::vector<TokenId>{'t', kFirstExtra + 1}));
  const Tokenizer th_first = Build(MakeBpeVocab({"th", "he"}, {"t h", "h e"}));
  EXPECT_EQ(Ids(th_first, "the", false, false), (std::vector<TokenId>{kFirstExtra, 'e'}));
}

TEST(BpeTest, ChainedMergesAndPreTokenizerWords) {
  const Tokenizer tok = Build(MakeBpeVocab({"Ġt", "he", "Ġthe"}, {"Ġ t", "h e", "Ġt he"}));
  const TokenId the = kFirstExtra + 2;
  // " the the": words " the", " the"; each merges completely.
  EXPECT_EQ(Ids(tok, " the the", false, false), (std::vector<TokenId>{the, the}));
  // "the" alone has no leading space: t + he.
  EXPECT_EQ(Ids(tok, "the", false, false), (std::vector<TokenId>{'t', kFirstExtra + 1}));
  // Merges never cross pre-tokenizer words: "t" and "he" in "t.he" stay apart.
  EXPECT_EQ(Ids(tok, "t.he", false, false),
            (std::vector<TokenId>{'t', '.', kFirstExtra + 1}));
}

TEST(BpeTest, PiecesRoundTripArbitraryBytes) {
  const Tokenizer tok = Build(MakeBpeVocab({"Ġt", "he"}, {"Ġ t", "h e"}));
  const std::string text = "Ünïcödé \t\n  the 42 \xF0\x9F\xA6\x99!";
  std::string back;
  for (TokenId id : Ids(tok, text, false, false)) back += tok.TokenToPiece(id);
  EXPECT_EQ(back, text);
}

TEST(BpeTest, InvalidUtf8BecomesReplacementCharacter) {
  // llama.cpp tokenizes each invalid byte as U+FFFD (EF BF BD) in byte-level BPE.
  const Tokenizer tok = Build(MakeBpeVocab({}, {}));
  std::string back;
  for (TokenId id : Ids(tok, "a\xFF" "b", false, false)) back += tok.TokenToPiece(id);
  EXPECT_EQ(back, "a\xEF\xBF\xBD" "b");
}

TEST(SpecialTokensTest, ControlTokensOnlyWithParseSpecial) {
  const Tokenizer tok = Build(MakeBpeVocab({}, {}, {"<|im_start|>"}));
  const TokenId im_start = kFirstExtra;
  EXPECT_EQ(Ids(tok, "<|im_start|>a", false, true), (std::vector<TokenId>{im_start, 'a'}));
  const std::vector<TokenId> plain = Ids(tok, "<|im_start|>a", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  EXPECT_EQ(tok.Detokenize(plain, false, false), "<|im_start|>a");
  // Pieces: control tokens render only when asked to.
  EXPECT_EQ(tok.TokenToPiece(im_start, true), "<|im_start|>");
  EXPECT_EQ(tok.TokenToPiece(im_start, false), "");
}

TEST(SpecialTokensTest, UserDefinedTokensAreAlwaysParsed) {
  const Tokenizer tok = Build(MakeBpeVocab({}, {}, {}, {"<tool>"}));
  EXPECT_EQ(Ids(tok, "x<tool>y", false, false),
            (std::vector<TokenId>{'x', kFirstExtra, 'y'}));
  EXPECT_EQ(tok.TokenToPiece(kFirstExtra, false), "<tool>");
}

TEST(SpecialTokensTest, LongestSpecialTextWins) {
  const Tokenizer tok = Build(MakeBpeVocab({}, {}, {"<x>", "<x><y>", "<y>"}));
  const TokenId x = kFirstExtra, xy = kFirstExtra + 1, y = kFirstExtra + 2;
  EXPECT_EQ(Ids(tok, "<x><y><y><x>", false, true), (std::vector<TokenId>{xy, y, x}));
}

TEST(SpecialTokensTest, BosAndEosFollowTheVocabulary) {
  VocabData d = MakeBpeVocab({}, {}, {"<s>", "</s>"});
  d.bos_id = kFirstExtra;
  d.eos_id = kFirstExtra + 1;
  d.add_bos = true;
  d.add_eos = true;
  const Tokenizer tok = Build(d);
  EXPECT_EQ(Ids(tok, "a", true, false),
            (std::vector<TokenId>{kFirstExtra, 'a', kFirstExtra + 1}));
  EXPECT_EQ(Ids(tok, "a", false, false), (std::vector<TokenId>{'a'}));
  EXPECT_EQ(Ids(tok, "", true, false), (std::vector<TokenId>{kFirstExtra, kFirstExtra + 1}));
  EXPECT_EQ(tok.Detokenize(Ids(tok, "a b", true, false), true, false), "a b");
  EXPECT_TRUE(tok.IsEog(kFirstExtra + 1));
  EXPECT_FALSE(tok.IsEog(kFirstExtra));
}

// llama.cpp's end-of-generation rule: the fill-in-the-middle pad, repo and file-separator tokens
// (by text, or named by the GGUF) and its list of texts end a reply, as control tokens; a
// vocabulary with <|return|> and <|call|> keeps <|end|> as a token inside a turn, and one with
// <|tool_response> keeps </s> as text.
TEST(SpecialTokensTest, EndOfGenerationFollowsLlamaCpp) {
  {
    const Tokenizer tok = Build(MakeBpeVocab({}, {}, {},
                                             {"<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                                              "<|end|>", "[EOS]", "<tool>"}));
    for (int i = 0; i < 5; ++i) {
      EXPECT_TRUE(tok.IsEog(kFirstExtra + i)) << i;
      EXPECT_EQ(tok.TokenToPiece(kFirstExtra + i, false), "") << "control: " << i;
    }
    EXPECT_FALSE(tok.IsEog(kFirstExtra + 5));
  }
  {
    VocabData d = MakeBpeVocab({}, {}, {"<fill>"});
    d.fim_pad_id = kFirstExtra;  // named by the GGUF
    EXPECT_TRUE(Build(d).IsEog(kFirstExtra));
  }
  {
    const Tokenizer tok =
        Build(MakeBpeVocab({}, {}, {"<|end|>", "<|return|>", "<|call|>", "</s>", "<|tool_response>"}));
    EXPECT_FALSE(tok.IsEog(kFirstExtra));      // <|end|>
    EXPECT_TRUE(tok.IsEog(kFirstExtra + 1));   // <|return|>
    EXPECT_FALSE(tok.IsEog(kFirstExtra + 3));  // </s>
    EXPECT_EQ(tok.TokenToPiece(kFirstExtra, false), "<|end|>");
  }
}

TEST(SpmTest, ScoresDecideAndSpacesAreEscaped) {
  // "▁ab": candidates "▁a" (score -1) and "ab" (score -0.5): "ab" merges first, then "▁"+"ab"
  // is not a token -> [▁, ab]. With "▁ab" in the vocab it merges completely.
  const Tokenizer tok = Build(MakeSpmVocab({{"▁", -3}, {"a", -4}, {"b", -4}, {"▁a", -1},
                                            {"ab", -0.5f}}));
  const TokenId space = 259, ab = 263;
  EXPECT_EQ(Ids(tok, "ab", false, false), (std::vector<TokenId>{space, ab}));
  const Tokenizer full = Build(MakeSpmVocab({{"▁", -3}, {"a", -4}, {"b", -4}, {"▁a", -1},
                                             {"ab", -0.5f}, {"▁ab", -0.1f}}));
  EXPECT_EQ(Ids(full, "ab", false, false), (std::vector<TokenId>{264}));
  // BOS added by default for SPM. Detokenize: llama.cpp strips the added space only when it does
  // not strip a BOS (llama_detokenize's remove_space logic), and so do we.
  EXPECT_EQ(Ids(full, "ab", true, false), (std::vector<TokenId>{1, 264}));
  EXPECT_EQ(full.Detokenize(Ids(full, "ab ab", true, false), true, false), " ab ab");
  EXPECT_EQ(full.Detokenize(Ids(full, "ab ab", false, false), true, false), "ab ab");
}

TEST(SpmTest, ByteFallbackForUnknownCharacters) {
  const Tokenizer tok = Build(MakeSpmVocab({{"▁", -3}, {"a", -4}}));
  // "é" = C3 A9 -> <0xC3> <0xA9> (ids 3 + byte).
  EXPECT_EQ(Ids(tok, "aé", false, false), (std::vector<TokenId>{259, 260, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.TokenToPiece(3 + 0xC3), "\xC3");
  EXPECT_EQ(tok.Detokenize(Ids(tok, "aé", false, false), false, false), "aé");
}

TEST(SpmTest, NoSpacePrefixWhenDisabled) {
  VocabData d = MakeSpmVocab({{"▁", -3}, {"a", -4}});
  d.add_space_prefix = false;
  const Tokenizer tok = Build(d);
  EXPECT_EQ(Ids(tok, "a", false, false), (std::vector<TokenId>{260}));
}

TEST(SpmTest, SpacePrefixAfterSpecialToken) {
  // llama.cpp prefixes a space to the first fragment and to every fragment after a special.
  const Tokenizer tok = Build(MakeSpmVocab({{"▁", -3}, {"a", -4}}));
  EXPECT_EQ(Ids(tok, "a</s>a", false, true), (std::vector<TokenId>{259, 260, 2, 259, 260}));
}

TEST(SpmTest, Phi3QuirkStripsSpacesAfterSpecialTokens) {
  VocabData d = MakeSpmVocab({{"▁", -3}, {"a", -4}});
  d.tokens.push_back("<|user|>");  // user-defined; <|end|> would be forced to control (EOG)
  d.token_types.push_back(static_cast<int32_t>(TokenType::kUserDefined));
  d.scores.push_back(0);
  const TokenId user = static_cast<TokenId>(d.tokens.size() - 1);
  VocabData phi = d;
  phi.name = "Phi3";
  // Without the quirk the spaces after <|user|> stay text; with it (general.name ~ phi3) they go.
  EXPECT_EQ(Ids(Build(d), "<|user|>  a", false, false),
            (std::vector<TokenId>{user, 259, 259, 259, 260}));
  EXPECT_EQ(Ids(Build(phi), "<|user|>  a", false, false), (std::vector<TokenId>{user, 259, 260}));
}

TEST(PiecesTest, OutOfRangeIdsGiveEmptyPieces) {
  const Tokenizer tok = Build(MakeBpeVocab({}, {}));
  EXPECT_EQ(tok.TokenToPiece(-1), "");
  EXPECT_EQ(tok.TokenToPiece(tok.n_tokens()), "");
  const std::vector<TokenId> ids = {-5, 'a', 1 << 30};
  EXPECT_EQ(tok.Detokenize(ids, false, false), "a");
}

TEST(PreTokenizerTest, UnknownNameIsUnimplemented) {
  auto pre = PreTokenizer::Create("no-such-pre");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(pre.status().message().find("no-such-pre"), std::string::npos);
}

TEST(PreTokenizerTest, EveryListedFamilyCompilesAndPartitionsText) {
  const std::string text =
      "Hello, y'all! How're you 😁 ?我想在apple工作1314151天～ ------======= 3.14  \n\n\t x $+ ``";
  for (const char* name :
       {"default", "gpt-2", "gpt2", "llama3", "llama-bpe", "qwen2", "starcoder", "smollm",
        "falcon", "deepseek-llm", "deepseek-coder", "mpt", "gpt-neox", "refact", "dbrx",
        "stablelm2", "command-r", "olmo", "poro-chat", "bloom", "chatglm-bpe"}) {
    auto pre = PreTokenizer::Create(name);
    ASSERT_TRUE(pre.ok()) << name << ": " << pre.status().ToString();
    std::vector<std::string_view> words;
    ASSERT_TRUE(pre->Split(text, &words).ok()) << name;
    std::string joined;
    for (std::string_view w : words) {
      EXPECT_FALSE(w.empty()) << name;
      joined.append(w);
    }
    EXPECT_EQ(joined, text) << name;  // the words partition the text
  }
}

TEST(PreTokenizerTest, KnownSplits) {
  auto split = [](const char* name, std::string_view text) {
    auto pre = PreTokenizer::Create(name);
    EXPECT_TRUE(pre.ok());
    std::vector<std::string_view> words;
    EXPECT_TRUE(pre->Split(text, &words).ok());
    return std::vector<std::string>(words.begin(), words.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("gpt-2", "Hello world's  x\n"), (V{"Hello", " world", "'s", " ", " x", "\n"}));
  // Llama 3: digits in threes, case-insensitive contractions, newline runs kept together.
  EXPECT_EQ(split("llama-bpe", "12345 I'M\n\n ok"),
            (V{"123", "45", " I", "'M", "\n\n", " ok"}));
  // StarCoder: every digit alone before the GPT-2 splitter.
  EXPECT_EQ(split("starcoder", "x 123"), (V{"x", " ", "1", "2", "3"}));
  // Unicode letters and the non-ASCII whitespace U+3000.
  EXPECT_EQ(split("gpt-2", "Ünï\xE3\x80\x80" "ab"), (V{"Ünï", "\xE3\x80\x80", "ab"}));
}

}  // namespace
}  // namespace vlmd::engine::tokenizer
