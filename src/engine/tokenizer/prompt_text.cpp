// Prompt text with literal ranges (see prompt_text.h).
#include "engine/tokenizer/prompt_text.h"

#include <algorithm>

namespace vlmd::engine::tokenizer {

void PromptText::AddRange(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!literal_.empty() && literal_.back().end == begin) {
    literal_.back().end = end;
  } else {
    literal_.push_back({begin, end});
  }
}

void PromptText::AppendLiteral(std::string_view s) {
  const size_t begin = text_.size();
  text_.append(s);
  AddRange(begin, text_.size());
}

void PromptText::AppendPrompt(const PromptText& other) {
  const size_t base = text_.size();
  text_.append(other.text_);
  for (const TextRange& r : other.literal_) AddRange(base + r.begin, base + r.end);
}

void PromptText::Insert(size_t at, std::string_view s) {
  if (s.empty()) return;  // a range around `at` stays whole
  at = std::min(at, text_.size());
  text_.insert(at, s);
  std::vector<TextRange> out;
  out.reserve(literal_.size() + 1);
  for (const TextRange& r : literal_) {
    if (r.end <= at) {
      out.push_back(r);
    } else if (r.begin >= at) {
      out.push_back({r.begin + s.size(), r.end + s.size()});
    } else {  // at inside the range: split around the inserted bytes
      out.push_back({r.begin, at});
      out.push_back({at + s.size(), r.end + s.size()});
    }
  }
  literal_ = std::move(out);
}

void PromptText::Erase(size_t at, size_t n) {
  at = std::min(at, text_.size());
  n = std::min(n, text_.size() - at);
  if (n == 0) return;
  text_.erase(at, n);
  const size_t cut_end = at + n;
  // A byte b maps to b (before the cut), `at` (inside it) or b - n (after it).
  auto map = [&](size_t b) { return b <= at ? b : (b >= cut_end ? b - n : at); };
  std::vector<TextRange> old;
  old.swap(literal_);
  for (const TextRange& r : old) AddRange(map(r.begin), map(r.end));
}

void PromptText::EraseAll(std::string_view needle) {
  if (needle.empty()) return;
  std::string kept;
  kept.reserve(text_.size());
  std::vector<std::pair<size_t, size_t>> cuts;  // [first, last) of the old text, in order
  size_t start = 0;
  for (size_t at = text_.find(needle); at != std::string::npos; at = text_.find(needle, start)) {
    kept.append(text_, start, at - start);
    cuts.emplace_back(at, at + needle.size());
    start = at + needle.size();
  }
  if (cuts.empty()) return;
  kept.append(text_, start, std::string::npos);
  text_ = std::move(kept);
  // Old offsets to new ones, as Erase maps them (a byte inside a cut goes to the cut's start);
  // the ranges' ends come in order, so one sweep over the cuts serves them all.
  size_t removed = 0, next_cut = 0;
  auto map = [&](size_t b) {
    while (next_cut < cuts.size() && cuts[next_cut].second <= b) {
      removed += cuts[next_cut].second - cuts[next_cut].first;
      ++next_cut;
    }
    const bool inside = next_cut < cuts.size() && cuts[next_cut].first < b;
    return (inside ? cuts[next_cut].first : b) - removed;
  };
  std::vector<TextRange> old;
  old.swap(literal_);
  for (const TextRange& r : old) {
    const size_t begin = map(r.begin);
    AddRange(begin, map(r.end));
  }
}

PromptText PromptText::Slice(size_t begin, size_t end) const {
  end = std::min(end, text_.size());
  begin = std::min(begin, end);
  PromptText out(std::string_view(text_).substr(begin, end - begin));
  for (const TextRange& r : literal_) {
    const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) out.AddRange(b - begin, e - begin);
  }
  return out;
}

bool OverlapsAny(std::span<const TextRange> ranges, size_t begin, size_t end) {
  // The first range that ends after `begin`; it overlaps when it starts before `end`.
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                                   [](size_t b, const TextRange& r) { return b < r.end; });
  return it != ranges.end() && it->begin < end;
}

}  // namespace vlmd::engine::tokenizer
