// Incremental UTF-8 validation for streamed token pieces (see utf8_stream.h).
#include "engine/tokenizer/utf8_stream.h"

#include <cstdint>

namespace vlmd::engine::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the sequence `lead` starts and the allowed range of its second byte (Unicode Table
// 3-7, which excludes overlongs, surrogates and values above U+10FFFF); 0 if `lead` is not a lead.
struct LeadInfo {
  int length;
  uint8_t lo;
  uint8_t hi;
};

LeadInfo Lead(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

std::string Utf8StreamDecoder::Push(std::string_view bytes) {
  pending_.append(bytes);
  const std::string& buf = pending_;
  const size_t n = buf.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    const auto b0 = static_cast<uint8_t>(buf[i]);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    const LeadInfo lead = Lead(b0);
    if (lead.length == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    int k = 1;
    bool incomplete = false;
    for (; k < lead.length; ++k) {
      if (i + k >= n) {
        incomplete = true;
        break;
      }
      const auto b = static_cast<uint8_t>(buf[i + k]);
      const uint8_t lo = k == 1 ? lead.lo : 0x80;
      const uint8_t hi = k == 1 ? lead.hi : 0xBF;
      if (b < lo || b > hi) break;
    }
    if (incomplete) break;  // keep buf[i..] for the next Push
    if (k < lead.length) {  // ill-formed: the maximal valid prefix becomes one U+FFFD
      out.append(kReplacement);
      i += k;
      continue;
    }
    out.append(buf, i, lead.length);
    i += lead.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8StreamDecoder::Flush() {
  const bool had_pending = !pending_.empty();
  pending_.clear();
  return had_pending ? std::string(kReplacement) : std::string();
}

}  // namespace vlmd::engine::tokenizer
