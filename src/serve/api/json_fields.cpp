// Bounded JSON parsing and typed field readers for the request parsers (see json_fields.h).
#include "serve/api/json_fields.h"

#include <cmath>
#include <limits>

namespace vlmd::serve::api::internal {
namespace {

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 5: ...";
// the bracketed tag means nothing to a client.
std::string CleanParseMessage(std::string_view what) {
  if (!what.empty() && what.front() == '[') {
    const size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  constexpr size_t kMaxMessage = 200;
  if (what.size() > kMaxMessage) return std::string(what.substr(0, kMaxMessage)) + "...";
  return std::string(what);
}

// Whether `body` opens more than kMaxJsonDepth containers at once, brackets inside strings not
// counted (escapes skipped); malformed input is the parser's to report. One linear pass: the
// depth bound used to be a parser callback, which made nlohmann use its callback DOM parser,
// whose every closing container scans its parent for discarded values: quadratic in a
// container's length (200,000 `{}` in one array took 7 s of a handler thread, a 32 MB body
// would have taken hours; 0.1 s now, the test building it included).
bool NestedTooDeep(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

Result<Json> ParseJsonObject(std::string_view body, std::string_view what) {
  // Checked first, so the tree built never exceeds the bound; the parser itself is iterative,
  // so deeper input would cost heap, not stack.
  if (NestedTooDeep(body)) {
    return InvalidArgumentError(std::string(what) + ": JSON nested deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels");
  }
  Json j;
  try {
    j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/true,
                    /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    return InvalidArgumentError(std::string(what) +
                                ": invalid JSON: " + CleanParseMessage(e.what()));
  }
  if (!j.is_object()) return InvalidArgumentError(std::string(what) + ": not a JSON object");
  return j;
}

std::string FieldPath(std::string_view parent, std::string_view key) {
  std::string p(parent);
  if (!p.empty()) p += '.';
  p += key;
  return p;
}

std::string IndexPath(std::string_view parent, size_t index) {
  std::string p(parent);
  p += '[';
  p += std::to_string(index);
  p += ']';
  return p;
}

const Json* FindField(const Json& obj, std::string_view key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::string_view> ReadString(const Json& v, const std::string& path) {
  if (!v.is_string()) return InvalidArgumentError(path + ": not a string");
  return std::string_view(v.get_ref<const Json::string_t&>());
}

Result<bool> ReadBool(const Json& v, const std::string& path) {
  if (!v.is_boolean()) return InvalidArgumentError(path + ": not a boolean");
  return v.get<bool>();
}

Result<double> ReadNumber(const Json& v, const std::string& path) {
  if (!v.is_number()) return InvalidArgumentError(path + ": not a number");
  return v.get<double>();  // the parser refuses literals that overflow double
}

Result<int64_t> ReadInteger(const Json& v, const std::string& path) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d)
      return InvalidArgumentError(path + ": not an integer");
    if (d >= 9.2e18) return kMax;  // below 2^63, so the cast below stays defined
    if (d <= -9.2e18) return kMin;
    return static_cast<int64_t>(d);
  }
  return InvalidArgumentError(path + ": not an integer");
}

Result<uint64_t> ReadUnsigned(const Json& v, const std::string& path) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return InvalidArgumentError(path + ": must be a non-negative integer");
    return static_cast<uint64_t>(i);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d)
      return InvalidArgumentError(path + ": not an integer");
    if (d < 0) return InvalidArgumentError(path + ": must be a non-negative integer");
    if (d >= 18446744073709551616.0) return InvalidArgumentError(path + ": larger than 2^64-1");
    return static_cast<uint64_t>(d);
  }
  return InvalidArgumentError(path + ": not an integer");
}

std::string Quote(std::string_view text) {
  std::string q = "'";
  if (text.size() > kMaxQuotedBytes) {
    // Cut at a UTF-8 character boundary (never before a continuation byte 10xxxxxx).
    size_t n = kMaxQuotedBytes;
    while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0u) == 0x80u) --n;
    q += text.substr(0, n);
    q += "...";
  } else {
    q += text;
  }
  q += '\'';
  return q;
}

}  // namespace vlmd::serve::api::internal
