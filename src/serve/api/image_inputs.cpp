// Image references -> request images under the limits; strict http(s) URL host parsing for the
// allowlist (image_inputs.h). Strictness matters here: a lenient parser that reads
// "http://allowed.com\@evil.com" or "http://allowed.com@evil.com" differently from the fetcher
// would let a request through the allowlist to another host.
#include "serve/api/image_inputs.h"

#include <string>

#include "serve/api/json_fields.h"

namespace vlmd::serve::api::internal {
namespace {

char LowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = LowerAscii(c);
  return out;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && Lower(s.substr(0, prefix.size())) == prefix;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsHostChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.';
}

// letters/digits/'-' in dot-separated, non-empty labels.
bool IsRegName(std::string_view host) {
  if (host.empty() || host.front() == '.' || host.back() == '.') return false;
  char prev = '.';
  for (char c : host) {
    if (!IsHostChar(c) || (c == '.' && prev == '.')) return false;
    prev = c;
  }
  return true;
}

bool IsIpv6Literal(std::string_view s) {
  if (s.size() < 2) return false;
  for (char c : s) {
    if (!IsHex(c) && c != ':' && c != '.') return false;
  }
  return s.find(':') != std::string_view::npos;
}

}  // namespace

std::string RequestPath(std::string_view url) {
  const size_t host_start = url.find("://") + 3;
  const size_t at = url.find_first_of("/?#", host_start);
  if (at == std::string_view::npos || url[at] == '#') return "/";
  std::string path(url.substr(at, url.find('#', at) - at));
  if (path.front() == '?') path.insert(path.begin(), '/');
  return path;
}

Result<HttpUrl> ParseHttpUrl(std::string_view url) {
  if (url.size() > kMaxUrlBytes) {
    return InvalidArgumentError("URL longer than " + std::to_string(kMaxUrlBytes) + " bytes");
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return InvalidArgumentError("URL contains a space, control or non-ASCII character");
    }
  }
  HttpUrl out;
  std::string_view rest;
  if (StartsWithIgnoreCase(url, "http://")) {
    out.scheme = "http";
    rest = url.substr(7);
  } else if (StartsWithIgnoreCase(url, "https://")) {
    out.scheme = "https";
    rest = url.substr(8);
  } else {
    return InvalidArgumentError("URL scheme must be http or https");
  }
  const size_t end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos) {
    return InvalidArgumentError("URL must not contain user information ('@')");
  }
  std::string_view host;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgumentError("URL has an unclosed '['");
    host = authority.substr(1, close - 1);
    if (!IsIpv6Literal(host)) return InvalidArgumentError("URL has a malformed IPv6 host");
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return InvalidArgumentError("URL has junk after the IPv6 host");
      port = after.substr(1);
      if (port.empty()) return InvalidArgumentError("URL has an empty port");
    }
  } else {
    const size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return InvalidArgumentError("URL has an empty port");
    }
    if (!IsRegName(host)) return InvalidArgumentError("URL has a malformed host");
  }
  if (!port.empty()) {
    int32_t p = 0;
    for (char c : port) {
      if (!IsDigit(c) || p > 65535) return InvalidArgumentError("URL has a malformed port");
      p = p * 10 + (c - '0');
    }
    if (p < 1 || p > 65535) return InvalidArgumentError("URL port must be in 1..65535");
    out.port = p;
  }
  out.host = Lower(host);
  return out;
}

bool HostAllowed(std::string_view host, const std::vector<std::string>& allowlist) {
  const std::string h = Lower(host);
  for (std::string_view entry : allowlist) {
    if (entry.size() >= 2 && entry.front() == '[' && entry.back() == ']') {
      entry = entry.substr(1, entry.size() - 2);
    }
    if (Lower(entry) == h) return true;
  }
  return false;
}

Status ImageCollector::ReserveSlot(const std::string& path) {
  if (count_ >= limits_.max_images) {
    return OutOfRangeError(path + ": too many images (the limit is " +
                           std::to_string(limits_.max_images) + " per request)");
  }
  ++count_;
  return Status::Ok();
}

Status ImageCollector::AddDecoded(std::string bytes, const std::string& path) {
  if (bytes.empty()) return InvalidArgumentError(path + ": empty image");
  req_->images.push_back(std::move(bytes));
  return Status::Ok();
}

Status ImageCollector::AddBase64(std::string_view text, const std::string& path) {
  VLMD_RETURN_IF_ERROR(ReserveSlot(path));
  Result<std::string> bytes = StartsWithIgnoreCase(text, "data:")
                                  ? DecodeDataUri(text, limits_.max_image_bytes)
                                  : DecodeBase64(text, limits_.max_image_bytes);
  if (!bytes.ok()) return bytes.status().WithContext(path);
  return AddDecoded(std::move(bytes).value(), path);
}

Status ImageCollector::AddUrl(std::string_view url, const std::string& path) {
  VLMD_RETURN_IF_ERROR(ReserveSlot(path));
  if (StartsWithIgnoreCase(url, "data:")) {
    Result<std::string> bytes = DecodeDataUri(url, limits_.max_image_bytes);
    if (!bytes.ok()) return bytes.status().WithContext(path);
    return AddDecoded(std::move(bytes).value(), path);
  }
  if (!StartsWithIgnoreCase(url, "http://") && !StartsWithIgnoreCase(url, "https://")) {
    return InvalidArgumentError(path + ": unsupported URL scheme (send a data: URI)");
  }
  if (limits_.url_host_allowlist.empty()) {
    return InvalidArgumentError(path + ": image URLs are not allowed (configure an allowlist)");
  }
  Result<HttpUrl> parsed = ParseHttpUrl(url);
  if (!parsed.ok()) return parsed.status().WithContext(path);
  if (!HostAllowed(parsed->host, limits_.url_host_allowlist)) {
    return InvalidArgumentError(path + ": image URL host " + Quote(parsed->host) +
                                " is not in the allowlist");
  }
  req_->image_url_positions.push_back(count_ - 1);
  req_->image_urls.emplace_back(url);
  return Status::Ok();
}

Status ImageCollector::AddBytes(std::string bytes, const std::string& path) {
  VLMD_RETURN_IF_ERROR(ReserveSlot(path));
  if (bytes.size() > limits_.max_image_bytes) {
    return OutOfRangeError(path + ": image of " + std::to_string(bytes.size()) +
                           " bytes exceeds the limit of " +
                           std::to_string(limits_.max_image_bytes) + " bytes");
  }
  return AddDecoded(std::move(bytes), path);
}

}  // namespace vlmd::serve::api::internal
