// Output word filter (issue 6): sensitive words/phrases compiled into one Aho-Corasick automaton
// over bytes, run over the generated text as it streams, so a word split across tokens or SSE
// chunks is still caught. Each match is masked ("***") or stops the reply (content_filter).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlmd::serve::policy {

// Match semantics (shared by StreamFilter, FilterText and the tests' naive reference):
//   Scan the text left to right. At the first byte position p where some word ends and that word
//   starts at or after the end of the previous match, take the LONGEST word ending at p, mask it
//   (or block), and restart the scan right after it. Letters A-Z match a-z (ASCII only; all other
//   bytes, including every byte of a multi-byte UTF-8 character, must be equal).
// Consequences: "he" in "hers" is caught at 'e' before "hers" can complete (first end wins); of
// "she" and "he" ending at the same byte, "she" is taken (longest wins); matches never overlap.
// Because the automaton works on bytes and the rule only looks at the text, the result is the
// same however the text is split into pieces.

enum class FilterAction { kMask, kBlock };

// Parses "mask" | "block" (exact, lower case). INVALID_ARGUMENT otherwise. Thread-safe.
Result<FilterAction> ParseFilterAction(std::string_view s);

// The compiled automaton. Immutable after Compile/LoadFile, so one instance is shared read-only
// (shared_ptr<const WordFilter>) by every reply on every thread.
//
// Layout (memory matters at 100k words): states are numbered in breadth-first order from sorted
// words, so the children of a state are the consecutive states [first_child[s], first_child[s+1])
// and the edge into state c is labelled label[c]: no per-state edge lists and no target array.
// Goto is a binary search over those labels, except at the root, which has a dense 256 table (the
// state every scan falls back to). About 13 bytes per state; states <= total word bytes + 1.
class WordFilter {
 public:
  static constexpr size_t kMaxWords = 100000;
  static constexpr size_t kMaxWordBytes = 256;

  // words: UTF-8 each (invalid UTF-8 -> INVALID_ARGUMENT naming the index). ASCII whitespace is
  // trimmed at both ends; words that become empty are skipped; a word over kMaxWordBytes bytes
  // after trimming -> INVALID_ARGUMENT naming the index. More than kMaxWords non-empty words ->
  // INVALID_ARGUMENT. A-Z is folded to a-z; duplicates (after folding) count once. An empty list
  // is allowed and matches nothing. Thread-safe (pure).
  static Result<std::shared_ptr<const WordFilter>> Compile(std::span<const std::string> words);

  // One word/phrase per line of the file at `path` (UTF-8; a trailing '\r' is stripped; lines
  // that are blank or whose first non-whitespace byte is '#' are skipped). NOT_FOUND if the file
  // cannot be read; INVALID_ARGUMENT "path:line: ..." for a bad line. Thread-safe.
  static Result<std::shared_ptr<const WordFilter>> LoadFile(const std::string& path);

  // Distinct words after trimming and case folding.
  size_t word_count() const { return word_count_; }
  // Longest word in bytes (0 for an empty filter). A stream holds back at most this minus one.
  size_t max_word_bytes() const { return max_word_bytes_; }
  size_t state_count() const { return label_.size(); }

  // --- Automaton, for StreamFilter. State 0 is the root (the empty prefix). ---
  using State = uint32_t;
  // The state after reading byte `b` (not yet case-folded) in state `s`: goto, else failure links.
  State Next(State s, uint8_t b) const;
  // Bytes of the longest word that is a suffix of the state's string; 0 if none.
  size_t MatchLength(State s) const { return out_len_[s]; }
  // Length of the state's string: the bytes a stream must hold back in this state.
  size_t Depth(State s) const { return depth_[s]; }

 private:
  WordFilter() = default;
  // Builds the automaton from sorted, distinct, folded, non-empty words.
  void Build(const std::vector<std::string>& sorted_words);
  State Child(State s, uint8_t b) const;  // goto edge, or kNone

  static constexpr State kNone = 0xffffffffu;

  size_t word_count_ = 0;
  size_t max_word_bytes_ = 0;
  State root_next_[256] = {};         // goto from the root; 0 (root) where there is no edge
  std::vector<uint32_t> first_child_;  // size states + 1
  std::vector<uint32_t> fail_;         // failure link: the longest proper suffix that is a state
  std::vector<uint8_t> label_;         // byte on the edge into the state (folded)
  std::vector<uint16_t> depth_;        // <= kMaxWordBytes
  std::vector<uint16_t> out_len_;      // via dictionary links, see MatchLength
};

// The filter state of one reply. Not thread-safe: one instance per reply, used by one thread at
// a time. A null `filter` passes everything through.
class StreamFilter {
 public:
  StreamFilter(std::shared_ptr<const WordFilter> filter, FilterAction action,
               std::string mask = "***");

  struct Output {
    std::string text;      // safe to send now
    bool blocked = false;  // kBlock: a word was found; `text` ends before it; the reply must stop
  };

  // Feeds the next piece of generated text (any split, even inside a UTF-8 character). Returns
  // every byte that can no longer be part of a match and holds back exactly the current partial
  // match (<= max_word_bytes() - 1 bytes). kMask: each match becomes `mask`. kBlock: on the first
  // match returns the text before it with blocked=true; from then on every Feed/Finish returns
  // empty text and blocked=true. Cut points fall only on the start of a word (a character start)
  // or where the input piece itself ended, so output is valid UTF-8 when the input is and pieces
  // hold whole characters; the concatenation of all outputs is valid whenever the input's is.
  Output Feed(std::string_view piece);
  // Reads `context`, text the client has before this reply (the assistant message it asked to
  // continue, or the end of its raw prompt), without emitting any of it: a word begun there and
  // completed by the reply is caught, its reply part masked (or the reply blocked), where it
  // passed since the filter saw only the reply. Words wholly inside the context are the client's
  // own text: not counted. Call before the first Feed.
  void Prime(std::string_view context);

  // End of the reply: releases what was held back (it cannot complete a word any more). The
  // stream may be fed again afterwards as if new (matches() keeps counting).
  Output Finish();

  int matches() const { return matches_; }
  bool blocked() const { return blocked_; }
  // Bytes held back now (the current partial match).
  size_t held_bytes() const { return held_.size(); }

 private:
  std::shared_ptr<const WordFilter> filter_;
  FilterAction action_;
  std::string mask_;
  WordFilter::State state_ = 0;
  std::string held_;  // the bytes of the current partial match, already read by the automaton
  size_t primed_ = 0;  // how many of held_'s first bytes are Prime's context (never emitted)
  int matches_ = 0;
  bool blocked_ = false;
};

// Whole-text convenience: the same as feeding `text` in one piece and then Finish(). Thread-safe.
struct FilteredText {
  std::string text;
  int matches = 0;
  bool blocked = false;
};
FilteredText FilterText(std::shared_ptr<const WordFilter> filter, FilterAction action,
                        std::string_view text, std::string mask = "***");

}  // namespace vlmd::serve::policy
