// Output word filter (issue 6): Aho-Corasick vs a naive reference of the documented semantics,
// streaming with arbitrary splits (inside UTF-8 characters too), hold-back bound, block mode,
// word list loading.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "serve/policy/word_filter.h"

namespace vlmd::serve::policy {
namespace {

std::shared_ptr<const WordFilter> MustCompile(const std::vector<std::string>& words) {
  auto f = WordFilter::Compile(words);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? *f : nullptr;
}

// --- Naive reference: O(n * words * len), written straight from the header's rule. ---
std::string Fold(std::string_view s) {
  std::string r(s);
  for (char& c : r) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return r;
}

std::string TrimWs(const std::string& s) {
  const char* ws = " \t\n\v\f\r";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

struct RefResult {
  std::string text;
  int matches = 0;
  bool blocked = false;
  std::vector<size_t> held;  // held[p]: bytes a stream must hold after reading p bytes
};

RefResult Reference(const std::vector<std::string>& raw_words, std::string_view text,
                    FilterAction action, const std::string& mask = "***") {
  std::vector<std::string> words;
  for (const auto& w : raw_words) {
    std::string t = Fold(TrimWs(w));
    if (!t.empty()) words.push_back(t);
  }
  const std::string ft = Fold(text);
  RefResult r;
  r.held.assign(text.size() + 1, 0);
  size_t seg = 0;  // end of the previous match
  for (size_t e = 1; e <= text.size(); ++e) {
    size_t best = 0;
    for (const auto& w : words) {
      if (w.size() <= e - seg && w.size() > best && ft.compare(e - w.size(), w.size(), w) == 0) {
        best = w.size();
      }
    }
    if (best > 0) {
      r.text.append(text.substr(seg, e - best - seg));
      ++r.matches;
      seg = e;
      if (action == FilterAction::kBlock) {
        r.blocked = true;
        return r;
      }
      r.text += mask;
      continue;
    }
    // Held: the longest suffix of text[seg, e) that is a prefix of some word.
    for (size_t k = e - seg; k > 0; --k) {
      bool prefix = false;
      for (const auto& w : words) {
        if (w.size() >= k && ft.compare(e - k, k, w, 0, k) == 0) {
          prefix = true;
          break;
        }
      }
      if (prefix) {
        r.held[e] = k;
        break;
      }
    }
  }
  r.text.append(text.substr(seg));
  return r;
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((uint8_t(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

struct Streamed {
  std::string text;
  bool blocked = false;
  int matches = 0;
};

// Feeds `pieces` one by one and checks after each Feed that exactly the reference's partial match
// is held (and never more than max_word_bytes - 1).
Streamed StreamPieces(const std::shared_ptr<const WordFilter>& f, FilterAction action,
                      const std::vector<std::string>& pieces, const RefResult* ref = nullptr) {
  StreamFilter sf(f, action);
  Streamed s;
  size_t fed = 0;
  for (const auto& p : pieces) {
    auto o = sf.Feed(p);
    fed += p.size();
    s.text += o.text;
    if (o.blocked) {
      s.blocked = true;
      EXPECT_EQ(sf.held_bytes(), 0u);
      continue;
    }
    EXPECT_LE(sf.held_bytes(), f->max_word_bytes() > 0 ? f->max_word_bytes() - 1 : 0);
    if (ref != nullptr) {
      EXPECT_EQ(sf.held_bytes(), ref->held[fed]) << "after " << fed << " bytes";
    }
  }
  auto o = sf.Finish();
  s.text += o.text;
  s.blocked = s.blocked || o.blocked;
  s.matches = sf.matches();
  EXPECT_EQ(sf.blocked(), s.blocked);
  return s;
}

std::vector<std::string> SplitAt(std::string_view text, std::vector<size_t> cuts) {
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::string> out;
  size_t prev = 0;
  for (size_t c : cuts) {
    out.emplace_back(text.substr(prev, c - prev));
    prev = c;
  }
  out.emplace_back(text.substr(prev));
  return out;
}

std::vector<std::string> Bytes(std::string_view text) {
  std::vector<std::string> out;
  for (char c : text) out.emplace_back(1, c);
  return out;
}

TEST(WordFilterAction, Parse) {
  ASSERT_TRUE(ParseFilterAction("mask").ok());
  EXPECT_EQ(*ParseFilterAction("mask"), FilterAction::kMask);
  EXPECT_EQ(*ParseFilterAction("block"), FilterAction::kBlock);
  for (const char* bad : {"", "Mask", "drop", "block "}) {
    auto r = ParseFilterAction(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(WordFilter, SplitAcrossPiecesIsMasked) {
  auto f = MustCompile({"password"});
  StreamFilter sf(f, FilterAction::kMask);
  auto a = sf.Feed("my pass");
  EXPECT_EQ(a.text, "my ");  // "pass" could still become "password"
  EXPECT_EQ(sf.held_bytes(), 4u);
  auto b = sf.Feed("word is x");
  EXPECT_EQ(b.text, "*** is x");
  EXPECT_EQ(sf.Finish().text, "");
  EXPECT_EQ(sf.matches(), 1);
  EXPECT_FALSE(sf.blocked());
}

// A reply that continues the client's text (an assistant prefill "the word is pass", a raw
// prompt's end) completes words begun there: the filter primed with that text catches them and
// masks the reply's part; words wholly in the client's text are not the reply's.
TEST(WordFilter, PrimedWithTheClientsTextCatchesWordsItBegan) {
  auto f = MustCompile({"password", "bomb"});
  {
    StreamFilter sf(f, FilterAction::kMask);
    sf.Prime("the word is pass");
    EXPECT_EQ(sf.Feed("word here").text, "*** here");
    EXPECT_EQ(sf.Finish().text, "");
    EXPECT_EQ(sf.matches(), 1);
  }
  {  // byte by byte, and blocking
    StreamFilter sf(f, FilterAction::kBlock);
    sf.Prime("make a bo");
    std::string out;
    for (const std::string& b : Bytes("mb now")) out += sf.Feed(b).text;
    EXPECT_TRUE(sf.blocked());
    EXPECT_EQ(out, "");
  }
  {  // a word of the client's own is not counted, and a prefix the reply does not complete passes
    StreamFilter sf(f, FilterAction::kMask);
    sf.Prime("a bomb pass");  // within the 7 bytes read: "mb pass"; the whole "bomb" before
    EXPECT_EQ(sf.Feed("port").text, "port");
    EXPECT_EQ(sf.Feed(" ok").text, " ok");
    EXPECT_EQ(sf.Finish().text, "");
    EXPECT_EQ(sf.matches(), 0);
    StreamFilter own(f, FilterAction::kMask);
    own.Prime("bomb");
    EXPECT_EQ(own.Feed("s away").text, "s away");
    EXPECT_EQ(own.Finish().text, "");
    EXPECT_EQ(own.matches(), 0);
  }
  {  // a word of the client's own that begins a longer one: the reply finishing it is caught
    auto nested = MustCompile({"ass", "asshole"});
    StreamFilter sf(nested, FilterAction::kMask);
    sf.Prime("you ass");
    EXPECT_EQ(sf.Feed("hole!").text, "***!");
    EXPECT_EQ(sf.matches(), 1);
  }
  {  // a prefix still open at the end: the reply's bytes of it are released, not the client's
    StreamFilter sf(f, FilterAction::kMask);
    sf.Prime("xx pa");
    EXPECT_EQ(sf.Feed("ss").text, "");
    EXPECT_EQ(sf.held_bytes(), 4u);
    EXPECT_EQ(sf.Finish().text, "ss");
  }
  {  // a long context: only its tail can begin a word
    StreamFilter sf(f, FilterAction::kMask);
    sf.Prime(std::string(10000, 'a') + "passwo");
    EXPECT_EQ(sf.Feed("rd").text, "***");
  }
}

TEST(WordFilter, PartialMatchThatFailsIsReleased) {
  auto f = MustCompile({"password"});
  StreamFilter sf(f, FilterAction::kMask);
  EXPECT_EQ(sf.Feed("pass").text, "");
  EXPECT_EQ(sf.Feed("port").text, "passport");
  EXPECT_EQ(sf.Feed(" passw").text, " ");
  EXPECT_EQ(sf.Finish().text, "passw");  // end of reply: a prefix is not a word
  EXPECT_EQ(sf.matches(), 0);
}

TEST(WordFilter, AsciiCaseFoldsBothSides) {
  auto f = MustCompile({"PassWord", "  secret\t"});
  EXPECT_EQ(f->word_count(), 2u);
  EXPECT_EQ(f->max_word_bytes(), 8u);
  auto r = FilterText(f, FilterAction::kMask, "PASSWORD password pAsSwOrD Secret SECRETS");
  EXPECT_EQ(r.text, "*** *** *** *** ***S");
  EXPECT_EQ(r.matches, 5);
  // Folding is ASCII only: Latin-1 capitals are not folded.
  auto g = MustCompile({"é"});
  EXPECT_EQ(FilterText(g, FilterAction::kMask, "É é").text, "É ***");
}

TEST(WordFilter, ChineseSplitInsideCharacters) {
  auto f = MustCompile({"机密", "内部资料"});
  const std::string text = "这是内部资料，属于机密文件。";
  const std::string want = "这是***，属于***文件。";
  EXPECT_EQ(FilterText(f, FilterAction::kMask, text).text, want);
  // Every cut position, including between the bytes of one character.
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    auto s = StreamPieces(f, FilterAction::kMask, SplitAt(text, {cut}));
    EXPECT_EQ(s.text, want) << "cut at " << cut;
    EXPECT_EQ(s.matches, 2);
  }
  // One byte at a time: "机" (3 bytes) arrives in three Feeds.
  auto s = StreamPieces(f, FilterAction::kMask, Bytes(text));
  EXPECT_EQ(s.text, want);
  // Pieces of whole characters give whole characters back.
  StreamFilter sf(f, FilterAction::kMask);
  for (const char* piece : {"这是内", "部资", "料，属于机", "密文件。"}) {
    auto o = sf.Feed(piece);
    EXPECT_TRUE(ValidUtf8(o.text)) << piece;
  }
}

TEST(WordFilter, OverlappingWordsFollowTheRule) {
  const std::vector<std::string> words = {"he", "she", "hers", "his"};
  auto f = MustCompile(words);
  // "ushers": "she" and "he" both end at index 3; the longest ("she") is taken, then "rs" is left.
  EXPECT_EQ(FilterText(f, FilterAction::kMask, "ushers").text, "u***rs");
  // "hers": "he" ends first, so "hers" never completes.
  EXPECT_EQ(FilterText(f, FilterAction::kMask, "hers").text, "***rs");
  EXPECT_EQ(FilterText(f, FilterAction::kMask, "this his").text, "t*** ***");
  // Without "he", "hers" is found whole (held back while it might still grow).
  auto g = MustCompile({"hers", "she"});
  EXPECT_EQ(FilterText(g, FilterAction::kMask, "ushers!").text, "u***rs!");
  EXPECT_EQ(FilterText(g, FilterAction::kMask, "hers!").text, "***!");
  for (const std::string text : {"ushers", "hers his she", "shehishers"}) {
    const RefResult ref = Reference(words, text, FilterAction::kMask);
    EXPECT_EQ(FilterText(f, FilterAction::kMask, text).text, ref.text) << text;
    EXPECT_EQ(StreamPieces(f, FilterAction::kMask, Bytes(text), &ref).text, ref.text) << text;
  }
}

TEST(WordFilter, LongestWordAtTheFirstEnd) {
  auto f = MustCompile({"b", "ab", "xab"});
  EXPECT_EQ(FilterText(f, FilterAction::kMask, "xab").text, "***");
  EXPECT_EQ(FilterText(f, FilterAction::kMask, "yab").text, "y***");
  // A word that would start inside the previous match does not count.
  auto g = MustCompile({"ab", "bc"});
  EXPECT_EQ(FilterText(g, FilterAction::kMask, "abc").text, "***c");
}

TEST(WordFilter, BlockReturnsPrefixThenNothing) {
  auto f = MustCompile({"机密", "secret"});
  StreamFilter sf(f, FilterAction::kBlock);
  auto a = sf.Feed("the se");
  EXPECT_EQ(a.text, "the ");
  EXPECT_FALSE(a.blocked);
  auto b = sf.Feed("cret plan");
  EXPECT_EQ(b.text, "");
  EXPECT_TRUE(b.blocked);
  EXPECT_TRUE(sf.blocked());
  auto c = sf.Feed("more");
  EXPECT_EQ(c.text, "");
  EXPECT_TRUE(c.blocked);
  auto d = sf.Finish();
  EXPECT_EQ(d.text, "");
  EXPECT_TRUE(d.blocked);
  EXPECT_EQ(sf.matches(), 1);

  StreamFilter sg(f, FilterAction::kBlock);
  auto e = sg.Feed("ok 机\xe5");  // "机" then the first byte of "密"
  EXPECT_EQ(e.text, "ok ");
  auto g = sg.Feed("\xaf\x86 after");
  EXPECT_EQ(g.text, "");
  EXPECT_TRUE(g.blocked);

  auto r = FilterText(f, FilterAction::kBlock, "a secret and 机密");
  EXPECT_EQ(r.text, "a ");
  EXPECT_TRUE(r.blocked);
  EXPECT_EQ(r.matches, 1);
}

TEST(WordFilter, HoldBackNeverExceedsLongestPartialMatch) {
  auto f = MustCompile({"abcdef", "xyz"});
  ASSERT_EQ(f->max_word_bytes(), 6u);
  StreamFilter sf(f, FilterAction::kMask);
  // A stream of near-misses: "abcde" repeated never completes, so exactly 5 bytes stay held.
  std::string all;
  for (int i = 0; i < 50; ++i) {
    auto o = sf.Feed("abcde");
    all += o.text;
    EXPECT_EQ(sf.held_bytes(), 5u);
    EXPECT_LE(sf.held_bytes(), f->max_word_bytes() - 1);
    EXPECT_EQ(all.size() + sf.held_bytes(), size_t(5 * (i + 1)));  // nothing lost, nothing early
  }
  all += sf.Finish().text;
  EXPECT_EQ(all.size(), 250u);
  // With a word list, text that shares no prefix is sent at once.
  StreamFilter sg(f, FilterAction::kMask);
  EXPECT_EQ(sg.Feed("hello world").text, "hello world");
  EXPECT_EQ(sg.held_bytes(), 0u);
}

TEST(WordFilter, EmptyFilterPassesThrough) {
  auto f = MustCompile({});
  EXPECT_EQ(f->word_count(), 0u);
  EXPECT_EQ(f->max_word_bytes(), 0u);
  auto g = MustCompile({"", "  ", "\t\r\n"});
  EXPECT_EQ(g->word_count(), 0u);
  for (const auto& filter : {f, g, std::shared_ptr<const WordFilter>()}) {
    StreamFilter sf(filter, FilterAction::kBlock);
    EXPECT_EQ(sf.Feed("anything 机").text, "anything 机");
    EXPECT_EQ(sf.held_bytes(), 0u);
    EXPECT_EQ(sf.Finish().text, "");
    EXPECT_EQ(sf.matches(), 0);
  }
  EXPECT_EQ(FilterText(f, FilterAction::kMask, "").text, "");
}

TEST(WordFilter, CompileValidates) {
  auto bad = WordFilter::Compile(std::vector<std::string>{"ok", "bad\xff"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("word 1"), std::string::npos) << bad.status().message();
  for (const char* invalid : {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe6\x9c"}) {
    EXPECT_FALSE(WordFilter::Compile(std::vector<std::string>{invalid}).ok());
  }
  const std::string max(WordFilter::kMaxWordBytes, 'a');
  EXPECT_TRUE(WordFilter::Compile(std::vector<std::string>{" " + max + " "}).ok());
  auto long_word = WordFilter::Compile(std::vector<std::string>{"x", max + "a"});
  ASSERT_FALSE(long_word.ok());
  EXPECT_NE(long_word.status().message().find("word 1"), std::string::npos);
  // Duplicates after folding count once.
  auto dup = MustCompile({"Word", "word", " WORD"});
  EXPECT_EQ(dup->word_count(), 1u);
}

TEST(WordFilter, WordCountLimitAndLargeList) {
  std::vector<std::string> words;
  words.reserve(WordFilter::kMaxWords + 1);
  size_t total_bytes = 0;
  for (size_t i = 0; i < WordFilter::kMaxWords; ++i) {
    std::string w = "w";
    w += std::to_string(i * 7919);
    total_bytes += w.size();
    words.push_back(std::move(w));
  }
  auto f = WordFilter::Compile(words);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->word_count(), WordFilter::kMaxWords);
  EXPECT_LT((*f)->state_count(), total_bytes);  // prefixes are shared
  std::printf("100k words, %zu bytes -> %zu states\n", total_bytes, (*f)->state_count());
  EXPECT_EQ(FilterText(*f, FilterAction::kMask, "x w7919 y").text, "x *** y");
  words.push_back("one more");
  auto over = WordFilter::Compile(words);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
}

class WordFilterFile : public testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = testing::TempDir() + "/vlmd_word_filter_" + name;
    std::ofstream(path, std::ios::binary) << content;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
};

TEST_F(WordFilterFile, CommentsCrlfAndBlankLines) {
  const std::string path =
      Write("ok.txt", "# sensitive words\r\n\r\nSecret\r\n  # indented comment\n机密\n  inner space  \nlast");
  auto f = WordFilter::LoadFile(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->word_count(), 4u);
  EXPECT_EQ(FilterText(*f, FilterAction::kMask, "a SECRET, 机密, inner space, last#").text,
            "a ***, ***, ***, ***#");
}

TEST_F(WordFilterFile, ErrorsNamePathAndLine) {
  const std::string path = Write("bad.txt", "fine\n# comment\nbro\xc3\x28ken\nfine too\n");
  auto f = WordFilter::LoadFile(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find(path + ":3"), std::string::npos) << f.status().message();

  const std::string long_path = Write("long.txt", "a\n" + std::string(300, 'z') + "\n");
  auto g = WordFilter::LoadFile(long_path);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(long_path + ":2"), std::string::npos);

  auto missing = WordFilter::LoadFile(testing::TempDir() + "/vlmd_no_such_word_list.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = WordFilter::LoadFile(testing::TempDir());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos) << dir.status().message();
}

// Random small alphabets (ASCII of both cases and 2-, 3- and 4-byte characters) so words overlap
// a lot; random splits at any byte. Streamed == FilterText == reference, held bytes == reference.
TEST(WordFilterProperty, RandomWordsTextsAndSplits) {
  const std::vector<std::string> alphabet = {"a", "b", "A", "B", " ", "é", "机", "密", "😀"};
  std::mt19937 rng(20240611);
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  int total_matches = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const int sigma = 2 + pick(int(alphabet.size()) - 1);
    auto rand_text = [&](int max_chars) {
      std::string s;
      const int n = pick(max_chars + 1);
      for (int i = 0; i < n; ++i) s += alphabet[size_t(pick(sigma))];
      return s;
    };
    std::vector<std::string> words;
    const int nwords = pick(7);
    for (int i = 0; i < nwords; ++i) words.push_back(rand_text(5));
    const std::string text = rand_text(40);
    const FilterAction action = pick(4) == 0 ? FilterAction::kBlock : FilterAction::kMask;
    SCOPED_TRACE("iter " + std::to_string(iter) + " text '" + text + "'");

    auto f = MustCompile(words);
    ASSERT_NE(f, nullptr);
    const RefResult ref = Reference(words, text, action);
    const FilteredText whole = FilterText(f, action, text);
    ASSERT_EQ(whole.text, ref.text);
    EXPECT_EQ(whole.matches, ref.matches);
    EXPECT_EQ(whole.blocked, ref.blocked);
    total_matches += ref.matches;

    // Byte cuts anywhere (several splits per case), and cuts at character starts only.
    for (int split = 0; split < 4; ++split) {
      std::vector<size_t> cuts;
      const int ncuts = pick(8);
      for (int k = 0; k < ncuts; ++k) cuts.push_back(text.empty() ? 0 : size_t(pick(int(text.size()) + 1)));
      const Streamed s = StreamPieces(f, action, SplitAt(text, cuts), &ref);
      ASSERT_EQ(s.text, ref.text);
      EXPECT_EQ(s.matches, ref.matches);
      EXPECT_EQ(s.blocked, ref.blocked);
    }
    std::vector<size_t> char_cuts;
    for (size_t i = 0; i < text.size(); ++i) {
      if ((uint8_t(text[i]) & 0xc0) != 0x80 && pick(2) == 0) char_cuts.push_back(i);
    }
    StreamFilter sf(f, action);
    std::string joined;
    for (const auto& p : SplitAt(text, char_cuts)) {
      auto o = sf.Feed(p);
      EXPECT_TRUE(ValidUtf8(o.text)) << "piece '" << p << "' gave '" << o.text << "'";
      joined += o.text;
    }
    joined += sf.Finish().text;
    EXPECT_EQ(joined, ref.text);
    EXPECT_TRUE(ValidUtf8(joined));
  }
  EXPECT_GT(total_matches, 500);  // the generator really exercises matches
}

}  // namespace
}  // namespace vlmd::serve::policy
