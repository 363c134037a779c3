// multipart/form-data bodies (RFC 7578), as /v1/vlm/invoke takes them: a "request" part (JSON)
// and image parts. Parsed from a body already read within --max-body-mb; strict, since a part
// misread is an image silently dropped: a malformed body is an error naming what is wrong.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlmd::serve::api {

struct MultipartPart {
  std::string name;      // Content-Disposition name (required)
  std::string filename;  // "" when none was given
  std::string content_type;
  std::string content;
};

// Parts beyond this are refused: far more than any request needs (one JSON part, a few images).
inline constexpr size_t kMaxMultipartParts = 64;

// The boundary of a "multipart/form-data; boundary=..." Content-Type (quoted or not, 1-70
// characters, RFC 2046), or INVALID_ARGUMENT.
Result<std::string> MultipartBoundary(std::string_view content_type);
// Whether `content_type`'s media type (before any parameters, trimmed) is `type`, compared
// without case as RFC 9110 8.3.1 says: "Application/JSON; charset=utf-8" is application/json,
// "application/jsonx" is not.
bool HasMediaType(std::string_view content_type, std::string_view type);
// Whether `content_type` names multipart/form-data (any parameters, any case).
bool IsMultipartFormData(std::string_view content_type);

// The parts of `body` in order. INVALID_ARGUMENT on a missing first or closing boundary, a part
// without Content-Disposition form-data and a name, part headers over 8 KiB, or too many parts.
Result<std::vector<MultipartPart>> ParseMultipart(std::string_view body, std::string_view content_type);

}  // namespace vlmd::serve::api
