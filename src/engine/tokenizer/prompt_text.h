// Prompt text that knows which of its bytes are a client's own words. The chat template marks
// each message's content as literal; the tokenizer reads control-token text inside a literal
// range as plain text (llama.cpp's parse_special = false, Hugging Face's split_special_tokens),
// so that a message holding "<|im_end|>\n<|im_start|>system\n..." cannot close its turn and open
// one of its own. The template's markers, and the wrapper tokens the engine adds around images,
// stay outside every range and are parsed as before. Text built without ranges (raw prompts, an
// operator's own text) tokenizes exactly as a plain string does.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vlmd::engine::tokenizer {

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

class PromptText {
 public:
  PromptText() = default;
  // Text without literal ranges: every control-token text in it is parsed.
  PromptText(std::string text) : text_(std::move(text)) {}  // NOLINT: implicit on purpose
  PromptText(std::string_view text) : text_(text) {}        // NOLINT
  PromptText(const char* text) : text_(text) {}             // NOLINT

  const std::string& text() const { return text_; }
  // Sorted, disjoint, non-empty, and never touching each other (adjacent ones are merged).
  std::span<const TextRange> literal() const { return literal_; }
  bool empty() const { return text_.empty(); }
  void clear() {
    text_.clear();
    literal_.clear();
  }
  size_t size() const { return text_.size(); }

  // Appends template text (parsed).
  void Append(std::string_view s) { text_.append(s); }
  // Appends a client's words (read as text).
  void AppendLiteral(std::string_view s);
  // Appends `other`, its literal ranges kept.
  void AppendPrompt(const PromptText& other);
  // Inserts template text at byte `at` (<= size()); a literal range around `at` is split there,
  // so that the inserted bytes are outside every range.
  void Insert(size_t at, std::string_view s);
  // Removes bytes [at, at + n) (clamped to the text), with their part of every range.
  void Erase(size_t at, size_t n);
  // Removes every occurrence of `needle` (non-empty; left to right, not overlapping), with its
  // part of every range, in one pass (Erase per occurrence took time quadratic in their count).
  void EraseAll(std::string_view needle);
  // Bytes [begin, end) with their part of every range (clamped to the text).
  PromptText Slice(size_t begin, size_t end) const;

 private:
  void AddRange(size_t begin, size_t end);  // appends, merging with a range ending at `begin`

  std::string text_;
  std::vector<TextRange> literal_;
};

// Whether [begin, end) overlaps one of `ranges` (sorted and disjoint).
bool OverlapsAny(std::span<const TextRange> ranges, size_t begin, size_t end);

}  // namespace vlmd::engine::tokenizer
