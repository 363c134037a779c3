// Aho-Corasick word filter: compile (validate, fold, sort, build in BFS order, failure links)
// and the streaming scan that holds back only the current partial match.
#include "serve/policy/word_filter.h"

#include <algorithm>
#include <utility>

#include "core/read_file.h"

namespace vlmd::serve::policy {
namespace {

inline uint8_t FoldByte(uint8_t b) { return (b >= 'A' && b <= 'Z') ? uint8_t(b + ('a' - 'A')) : b; }

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string_view TrimAscii(std::string_view s) {
  while (!s.empty() && IsAsciiSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// Checks one raw word; on success *out is the trimmed, folded word (possibly empty = skip).
Status PrepareWord(std::string_view raw, std::string* out) {
  if (!IsValidUtf8(raw)) return InvalidArgumentError("invalid UTF-8");
  const std::string_view t = TrimAscii(raw);
  if (t.size() > WordFilter::kMaxWordBytes) {
    return InvalidArgumentError(std::to_string(t.size()) + " bytes, over the limit of " +
                                std::to_string(WordFilter::kMaxWordBytes));
  }
  out->resize(t.size());
  for (size_t i = 0; i < t.size(); ++i) (*out)[i] = char(FoldByte(uint8_t(t[i])));
  return Status::Ok();
}

Status TooManyWords() {
  return InvalidArgumentError("more than " + std::to_string(WordFilter::kMaxWords) + " words");
}

}  // namespace

Result<FilterAction> ParseFilterAction(std::string_view s) {
  if (s == "mask") return FilterAction::kMask;
  if (s == "block") return FilterAction::kBlock;
  return InvalidArgumentError("word filter action must be \"mask\" or \"block\", got \"" +
                              std::string(s.substr(0, 64)) + "\"");
}

Result<std::shared_ptr<const WordFilter>> WordFilter::Compile(std::span<const std::string> words) {
  std::vector<std::string> folded;
  folded.reserve(std::min(words.size(), kMaxWords));
  std::string w;
  for (size_t i = 0; i < words.size(); ++i) {
    const Status s = PrepareWord(words[i], &w);
    if (!s.ok()) return s.WithContext("word filter: word " + std::to_string(i));
    if (w.empty()) continue;
    if (folded.size() == kMaxWords) return TooManyWords().WithContext("word filter");
    folded.push_back(w);
  }
  // std::string compares bytes as unsigned char, so sorted order = byte order of the labels.
  std::sort(folded.begin(), folded.end());
  folded.erase(std::unique(folded.begin(), folded.end()), folded.end());
  std::shared_ptr<WordFilter> f(new WordFilter());
  f->Build(folded);
  return std::shared_ptr<const WordFilter>(std::move(f));
}

Result<std::shared_ptr<const WordFilter>> WordFilter::LoadFile(const std::string& path) {
  // kMaxWords lines of kMaxWordBytes, with room for blank lines and comments.
  auto file = ReadWholeFile(path, uint64_t{4} * kMaxWords * kMaxWordBytes);
  if (!file.ok()) return file.status().WithContext("word list");
  const std::string& content = *file;

  std::vector<std::string> words;
  std::string w;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string_view line(content.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view t = TrimAscii(line);
    if (t.empty() || t.front() == '#') continue;
    // Validate here so the error names the line; Compile then re-checks cheaply.
    const Status s = PrepareWord(line, &w);
    if (!s.ok()) return s.WithContext(path + ":" + std::to_string(line_no));
    if (words.size() == kMaxWords) return TooManyWords().WithContext(path);
    words.emplace_back(t);
  }
  auto f = Compile(words);
  if (!f.ok()) return f.status().WithContext(path);
  return f;
}

void WordFilter::Build(const std::vector<std::string>& words) {
  word_count_ = words.size();
  max_word_bytes_ = 0;
  size_t total = 0;
  for (const auto& w : words) {
    max_word_bytes_ = std::max(max_word_bytes_, w.size());
    total += w.size();
  }
  // Trie in breadth-first order. A state at depth d stands for the words [lo, hi) that share its
  // d-byte prefix (contiguous because the words are sorted); its children split that range by
  // byte d and are appended in byte order, so each state's children are consecutive states.
  const size_t cap = total + 1;
  label_.reserve(cap);
  depth_.reserve(cap);
  first_child_.reserve(cap + 1);
  std::vector<uint32_t> lo{0}, hi{uint32_t(words.size())};
  std::vector<bool> terminal{false};
  lo.reserve(cap);
  hi.reserve(cap);
  label_.push_back(0);
  depth_.push_back(0);
  for (size_t s = 0; s < label_.size(); ++s) {
    first_child_.push_back(uint32_t(label_.size()));
    const size_t d = depth_[s];
    uint32_t i = lo[s];
    if (i < hi[s] && words[i].size() == d) {  // the prefix itself is a word (sorts first)
      terminal[s] = true;
      ++i;
    }
    while (i < hi[s]) {
      const char b = words[i][d];
      uint32_t j = i + 1;
      while (j < hi[s] && words[j][d] == b) ++j;
      label_.push_back(uint8_t(b));
      depth_.push_back(uint16_t(d + 1));
      lo.push_back(i);
      hi.push_back(j);
      terminal.push_back(false);
      i = j;
    }
  }
  first_child_.push_back(uint32_t(label_.size()));
  lo = {};
  hi = {};

  const size_t n = label_.size();
  for (State c = first_child_[0]; c < first_child_[1]; ++c) root_next_[label_[c]] = c;

  // Failure links and outputs in BFS order: a state's failure target is shallower, so it and its
  // own failure chain are final by the time the state is reached.
  fail_.assign(n, 0);
  out_len_.assign(n, 0);
  for (State p = 0; p < n; ++p) {
    for (State c = first_child_[p]; c < first_child_[p + 1]; ++c) {
      State f = 0;
      if (p != 0) {
        const uint8_t b = label_[c];
        State t = fail_[p];
        while (true) {
          if (t == 0) {
            f = root_next_[b];
            break;
          }
          const State g = Child(t, b);
          if (g != kNone) {
            f = g;
            break;
          }
          t = fail_[t];
        }
      }
      fail_[c] = f;
      // Dictionary link: a state that is not a word reports the longest word among its suffixes.
      out_len_[c] = terminal[c] ? depth_[c] : out_len_[f];
    }
  }
}

WordFilter::State WordFilter::Child(State s, uint8_t b) const {
  const uint8_t* first = label_.data() + first_child_[s];
  const uint8_t* last = label_.data() + first_child_[s + 1];
  const uint8_t* it = std::lower_bound(first, last, b);
  if (it == last || *it != b) return kNone;
  return State(it - label_.data());
}

WordFilter::State WordFilter::Next(State s, uint8_t b) const {
  b = FoldByte(b);
  while (s != 0) {
    const State c = Child(s, b);
    if (c != kNone) return c;
    s = fail_[s];
  }
  return root_next_[b];
}

StreamFilter::StreamFilter(std::shared_ptr<const WordFilter> filter, FilterAction action,
                           std::string mask)
    : filter_(std::move(filter)), action_(action), mask_(std::move(mask)) {}

StreamFilter::Output StreamFilter::Feed(std::string_view piece) {
  Output out;
  if (blocked_) {
    out.blocked = true;
    return out;
  }
  if (!filter_ || filter_->word_count() == 0) {
    out.text.assign(piece);
    return out;
  }
  const WordFilter& f = *filter_;
  // buf = held bytes (already read by the automaton) + the new piece.
  std::string buf = std::move(held_);
  held_.clear();
  const size_t already = buf.size();
  buf.append(piece);
  out.text.reserve(buf.size());
  // First byte of buf not yet emitted or masked: after the context's bytes (Prime), which are
  // the client's and never emitted.
  size_t start = primed_;
  for (size_t i = already; i < buf.size(); ++i) {
    state_ = f.Next(state_, uint8_t(buf[i]));
    const size_t len = f.MatchLength(state_);
    if (len == 0) continue;
    // The match lies inside the current partial match, which starts at or after `start`, or
    // in the context (a word the context began): then only its reply part is masked.
    const size_t begin = i + 1 - len;
    if (begin > start) out.text.append(buf, start, begin - start);
    ++matches_;
    state_ = 0;
    if (action_ == FilterAction::kBlock) {
      blocked_ = true;
      out.blocked = true;
      return out;
    }
    out.text += mask_;
    start = i + 1;
  }
  // Everything before the current partial match can no longer be part of a word.
  const size_t keep = f.Depth(state_);
  if (buf.size() - keep > start) out.text.append(buf, start, buf.size() - keep - start);
  held_.assign(buf, buf.size() - keep, keep);
  primed_ = primed_ > buf.size() - keep ? primed_ - (buf.size() - keep) : 0;
  return out;
}

void StreamFilter::Prime(std::string_view context) {
  if (!filter_ || filter_->word_count() == 0) return;
  const WordFilter& f = *filter_;
  // Only the last max_word_bytes - 1 bytes can begin a word the reply completes.
  const size_t tail = f.max_word_bytes() - 1;
  if (context.size() > tail) context.remove_prefix(context.size() - tail);
  // Words found in the context are the client's own and not acted on, so the scan does not
  // restart after them: a longer word they begin ("ass" of "asshole") is still followed.
  state_ = 0;
  for (const char c : context) state_ = f.Next(state_, uint8_t(c));
  const size_t keep = f.Depth(state_);
  held_.assign(context.substr(context.size() - keep));
  primed_ = keep;
}

StreamFilter::Output StreamFilter::Finish() {
  Output out;
  out.blocked = blocked_;
  if (!blocked_) out.text = held_.substr(primed_);
  held_.clear();
  primed_ = 0;
  state_ = 0;
  return out;
}

FilteredText FilterText(std::shared_ptr<const WordFilter> filter, FilterAction action,
                        std::string_view text, std::string mask) {
  StreamFilter sf(std::move(filter), action, std::move(mask));
  StreamFilter::Output a = sf.Feed(text);
  if (!a.blocked) a.text += sf.Finish().text;
  return FilteredText{std::move(a.text), sf.matches(), sf.blocked()};
}

}  // namespace vlmd::serve::policy
