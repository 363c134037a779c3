// Number spelling, escaping and name rules of the Prometheus text format 0.0.4.
#include "serve/obs/text_format.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>

namespace vlmd::serve::obs {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// Length of the well-formed UTF-8 sequence starting at s[i] (1-4), or 0 when the bytes there are
// not one (stray continuation byte, truncated sequence, overlong form, surrogate, > U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return len;
}

// Shared escaper: `escape_quote` distinguishes label values (which escape ") from HELP text.
void AppendEscaped(std::string_view s, bool escape_quote, std::string* out) {
  out->reserve(out->size() + s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && escape_quote) {
      out->append("\\\"");
    } else {
      const size_t len = Utf8SequenceLength(s, i);
      if (len == 0) {
        out->append(kReplacementChar);
        ++i;
        continue;
      }
      out->append(s.substr(i, len));
      i += len;
      continue;
    }
    ++i;
  }
}

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

void AppendValue(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
    return;
  }
  if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
    return;
  }
  char buf[64];
  std::to_chars_result r;
  // Every integral double below 2^63 is exactly an int64, so printing it as one is exact and
  // keeps counters readable ("1000000" rather than "1e+06").
  if (v == std::trunc(v) && std::fabs(v) < 9223372036854775808.0) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v));
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  }
  out->append(buf, r.ptr);
}

std::string FormatValue(double v) {
  std::string s;
  AppendValue(v, &s);
  return s;
}

void AppendEscapedHelp(std::string_view help, std::string* out) {
  AppendEscaped(help, /*escape_quote=*/false, out);
}

void AppendEscapedLabelValue(std::string_view value, std::string* out) {
  AppendEscaped(value, /*escape_quote=*/true, out);
}

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || c == ':' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

}  // namespace vlmd::serve::obs
