#include "serve/api/multipart.h"

#include <strings.h>

#include <algorithm>
#include <cctype>

namespace vlmd::serve::api {
namespace {

constexpr size_t kMaxPartHeaderBytes = 8 << 10;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && strncasecmp(s.data(), prefix.data(), prefix.size()) == 0;
}

// The value of parameter `key` in "type; k1=v1; k2="v 2"" (quoted values unescaped), or false.
bool Parameter(std::string_view header, std::string_view key, std::string* value) {
  size_t pos = header.find(';');
  while (pos != std::string_view::npos) {
    std::string_view rest = Trim(header.substr(pos + 1));
    const size_t eq = rest.find('=');
    const size_t semi = rest.find(';');
    if (eq == std::string_view::npos) return false;
    if (semi < eq) {  // a parameter without a value: skipped
      pos = static_cast<size_t>(rest.data() - header.data()) + semi;
      continue;
    }
    const std::string_view k = Trim(rest.substr(0, eq));
    std::string_view v = Trim(rest.substr(eq + 1));
    std::string parsed;
    size_t consumed;  // of rest, up to the end of this parameter's value
    if (!v.empty() && v.front() == '"') {
      size_t i = 1;
      for (; i < v.size() && v[i] != '"'; ++i) {
        if (v[i] == '\\' && i + 1 < v.size()) ++i;
        parsed += v[i];
      }
      if (i >= v.size()) return false;  // unterminated quote
      consumed = static_cast<size_t>(v.data() - rest.data()) + i + 1;
    } else {
      const size_t end = v.find(';');
      parsed = std::string(Trim(v.substr(0, end)));
      consumed = end == std::string_view::npos ? rest.size()
                                               : static_cast<size_t>(v.data() - rest.data()) + end;
    }
    if (k.size() == key.size() && strncasecmp(k.data(), key.data(), k.size()) == 0) {
      *value = std::move(parsed);
      return true;
    }
    const size_t next = rest.find(';', consumed);
    if (next == std::string_view::npos) return false;
    pos = static_cast<size_t>(rest.data() - header.data()) + next;
  }
  return false;
}

// One part's header block (without the blank line) into *part.
Status ParsePartHeaders(std::string_view block, size_t index, MultipartPart* part) {
  bool form_data = false;
  while (!block.empty()) {
    const size_t eol = block.find("\r\n");
    const std::string_view line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view() : block.substr(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return InvalidArgumentError("multipart part " + std::to_string(index) + ": malformed header line");
    }
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = Trim(line.substr(colon + 1));
    if (name.size() == 19 && strncasecmp(name.data(), "Content-Disposition", 19) == 0) {
      if (!StartsWithNoCase(value, "form-data")) break;
      form_data = Parameter(value, "name", &part->name);
      (void)Parameter(value, "filename", &part->filename);
    } else if (name.size() == 12 && strncasecmp(name.data(), "Content-Type", 12) == 0) {
      part->content_type = std::string(value);
    }
  }
  if (!form_data || part->name.empty()) {
    return InvalidArgumentError("multipart part " + std::to_string(index) +
                                " has no Content-Disposition: form-data with a name");
  }
  return Status::Ok();
}

}  // namespace

bool HasMediaType(std::string_view content_type, std::string_view type) {
  const std::string_view media = Trim(content_type.substr(0, content_type.find(';')));
  return media.size() == type.size() && StartsWithNoCase(media, type);
}

bool IsMultipartFormData(std::string_view content_type) {
  return HasMediaType(content_type, "multipart/form-data");
}

Result<std::string> MultipartBoundary(std::string_view content_type) {
  std::string boundary;
  if (!IsMultipartFormData(content_type) || !Parameter(content_type, "boundary", &boundary)) {
    return InvalidArgumentError("multipart/form-data without a boundary parameter");
  }
  if (boundary.empty() || boundary.size() > 70) {
    return InvalidArgumentError("multipart boundary must have 1 to 70 characters");
  }
  return boundary;
}

Result<std::vector<MultipartPart>> ParseMultipart(std::string_view body, std::string_view content_type) {
  VLMD_ASSIGN_OR_RETURN(const std::string boundary, MultipartBoundary(content_type));
  const std::string delimiter = "--" + boundary;
  // The first delimiter starts the body or a line (a preamble before it is ignored).
  size_t pos;
  if (body.substr(0, delimiter.size()) == delimiter) {
    pos = delimiter.size();
  } else {
    const size_t at = body.find("\r\n" + delimiter);
    if (at == std::string_view::npos) return InvalidArgumentError("multipart body without its boundary");
    pos = at + 2 + delimiter.size();
  }
  const std::string next_delimiter = "\r\n" + delimiter;
  std::vector<MultipartPart> parts;
  while (true) {
    // After a delimiter: "--" closes the body, CRLF starts a part (transport padding allowed).
    if (body.substr(pos, 2) == "--") return parts;
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") return InvalidArgumentError("multipart boundary not followed by a line end");
    pos += 2;
    if (parts.size() == kMaxMultipartParts) {
      return InvalidArgumentError("more than " + std::to_string(kMaxMultipartParts) + " multipart parts");
    }
    MultipartPart part;
    const size_t headers_end = body.find("\r\n\r\n", pos);
    const bool no_headers = body.substr(pos, 2) == "\r\n";
    if (!no_headers && (headers_end == std::string_view::npos || headers_end - pos > kMaxPartHeaderBytes)) {
      return InvalidArgumentError("multipart part " + std::to_string(parts.size()) +
                                  ": headers unterminated or over 8 KiB");
    }
    VLMD_RETURN_IF_ERROR(ParsePartHeaders(no_headers ? std::string_view() : body.substr(pos, headers_end - pos),
                                          parts.size(), &part));
    pos = no_headers ? pos + 2 : headers_end + 4;
    const size_t end = body.find(next_delimiter, pos);
    if (end == std::string_view::npos) {
      return InvalidArgumentError("multipart body truncated: no closing boundary after part '" + part.name + "'");
    }
    part.content = std::string(body.substr(pos, end - pos));
    parts.push_back(std::move(part));
    pos = end + next_delimiter.size();
  }
}

}  // namespace vlmd::serve::api
