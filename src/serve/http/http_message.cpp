#include "serve/http/http_message.h"

#include <strings.h>

namespace vlmd::serve {
namespace {

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string_view HeaderValue(const HttpHeaders& headers, std::string_view name, size_t i) {
  for (const auto& [n, v] : headers) {
    if (SameName(n, name) && i-- == 0) return v;
  }
  return {};
}

size_t HeaderCount(const HttpHeaders& headers, std::string_view name) {
  size_t n = 0;
  for (const auto& h : headers) n += SameName(h.first, name) ? 1 : 0;
  return n;
}

bool DecodeTargetPath(std::string_view target, std::string* path, std::string* query) {
  const size_t q = target.find('?');
  *query = q == std::string_view::npos ? std::string() : std::string(target.substr(q + 1));
  const std::string_view raw = target.substr(0, q);
  path->clear();
  path->reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '%') {
      *path += raw[i];
      continue;
    }
    const int hi = i + 1 < raw.size() ? HexDigit(raw[i + 1]) : -1;
    const int lo = i + 2 < raw.size() ? HexDigit(raw[i + 2]) : -1;
    if (hi < 0 || lo < 0 || hi * 16 + lo < 0x20) return false;  // no control characters
    *path += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

}  // namespace vlmd::serve
