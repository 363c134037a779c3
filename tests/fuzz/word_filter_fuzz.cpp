// libFuzzer target for the output word filter. Input layout: byte 0 = flags (bit 0: block mode,
// bit 1: empty mask), byte 1 = seed for the split points, then '\n'-separated words up to the
// first 0x01 byte, then the text. Traps if streaming in pieces differs from the whole-text result
// or from a naive scan (small inputs), if more than max_word_bytes-1 bytes are held back, or if
// valid UTF-8 in gives invalid UTF-8 out.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serve/policy/word_filter.h"

namespace {

using namespace vlmd::serve::policy;  // NOLINT(build/namespaces): test harness

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    const size_t len =
        c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((uint8_t(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

std::string Fold(std::string_view s) {
  std::string r(s);
  for (char& c : r) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return r;
}

std::string_view Trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// The header's rule, scanned naively: first end position, longest word there, restart after it.
FilteredText Naive(const std::vector<std::string>& raw, std::string_view text, bool block,
                   const std::string& mask) {
  std::vector<std::string> words;
  for (const auto& w : raw) {
    std::string t = Fold(Trim(w));
    if (!t.empty()) words.push_back(std::move(t));
  }
  const std::string ft = Fold(text);
  FilteredText r;
  size_t seg = 0;
  for (size_t e = 1; e <= text.size(); ++e) {
    size_t best = 0;
    for (const auto& w : words) {
      if (w.size() <= e - seg && w.size() > best && ft.compare(e - w.size(), w.size(), w) == 0) {
        best = w.size();
      }
    }
    if (best == 0) continue;
    r.text.append(text.substr(seg, e - best - seg));
    ++r.matches;
    seg = e;
    if (block) {
      r.blocked = true;
      return r;
    }
    r.text += mask;
  }
  r.text.append(text.substr(seg));
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool block = data[0] & 1;
  const std::string mask = (data[0] & 2) ? "" : "***";
  uint32_t rng = data[1] * 2654435761u + 1;
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  const size_t sep = rest.find('\x01');
  const std::string_view list = rest.substr(0, sep);
  const std::string_view text = sep == std::string_view::npos ? "" : rest.substr(sep + 1);

  std::vector<std::string> words;
  for (size_t pos = 0; pos <= list.size();) {
    size_t end = list.find('\n', pos);
    if (end == std::string_view::npos) end = list.size();
    words.emplace_back(list.substr(pos, end - pos));
    pos = end + 1;
  }
  auto compiled = WordFilter::Compile(words);
  if (!compiled.ok()) return 0;  // invalid UTF-8 or a word over the limit
  const auto& filter = *compiled;
  const FilterAction action = block ? FilterAction::kBlock : FilterAction::kMask;
  const FilteredText whole = FilterText(filter, action, text, mask);

  StreamFilter sf(filter, action, mask);
  std::string streamed;
  bool blocked = false;
  for (size_t pos = 0; pos < text.size();) {
    rng = rng * 1664525u + 1013904223u;
    const size_t n = 1 + (rng >> 24) % 9;  // pieces of 1..9 bytes, cutting characters anywhere
    const auto out = sf.Feed(text.substr(pos, n));
    pos += n;
    streamed += out.text;
    blocked = blocked || out.blocked;
    if (!out.blocked && filter->max_word_bytes() > 0 &&
        sf.held_bytes() > filter->max_word_bytes() - 1) {
      __builtin_trap();
    }
  }
  const auto fin = sf.Finish();
  streamed += fin.text;
  blocked = blocked || fin.blocked;
  if (streamed != whole.text || blocked != whole.blocked || sf.matches() != whole.matches) {
    __builtin_trap();
  }
  if (ValidUtf8(text) && !ValidUtf8(whole.text)) __builtin_trap();
  if (text.size() <= 2048 && words.size() <= 64) {
    const FilteredText naive = Naive(words, text, block, mask);
    if (naive.text != whole.text || naive.matches != whole.matches) __builtin_trap();
  }
  return 0;
}
