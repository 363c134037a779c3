// Private to serve/api: bounded JSON parsing and typed field readers whose errors name the field
// by its path ("messages[1].content[0].image_url.url: not a string"). No exception escapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vlmd::serve::api::internal {

using Json = nlohmann::json;

// Containers nested deeper than this are refused: the deepest valid request (chat image part)
// is 6 levels, and a bound keeps hostile input from costing recursion in any later consumer.
inline constexpr int kMaxJsonDepth = 32;
// Client text quoted back inside an error message is cut to this many bytes.
inline constexpr size_t kMaxQuotedBytes = 48;

// Parses `body` as one JSON object. INVALID_ARGUMENT "<what>: ..." for a syntax error (with its
// position), nesting deeper than kMaxJsonDepth, or a top-level value that is not an object.
// Pure; thread-safe.
Result<Json> ParseJsonObject(std::string_view body, std::string_view what);

// "parent.key" ("key" when parent is empty) and "parent[index]".
std::string FieldPath(std::string_view parent, std::string_view key);
std::string IndexPath(std::string_view parent, size_t index);

// The member `key` of object `obj`, or nullptr when it is absent or JSON null (OpenAI clients
// send null for "not given"). `obj` must be an object.
const Json* FindField(const Json& obj, std::string_view key);

// Typed reads of a present value; INVALID_ARGUMENT "<path>: not a ..." on a type mismatch.
// Returned views point into `v`.
Result<std::string_view> ReadString(const Json& v, const std::string& path);
Result<bool> ReadBool(const Json& v, const std::string& path);
Result<double> ReadNumber(const Json& v, const std::string& path);
// Any integral JSON number (1, -3, 2.0, 1e3); values beyond int64 saturate so range checks
// still see them as too large / too small. Fractions are INVALID_ARGUMENT.
Result<int64_t> ReadInteger(const Json& v, const std::string& path);
// A non-negative integral number that fits uint64 (exact for integer literals).
Result<uint64_t> ReadUnsigned(const Json& v, const std::string& path);

// `text` cut to kMaxQuotedBytes and wrapped in single quotes, for error messages.
std::string Quote(std::string_view text);

// The module's exception boundary: runs `parse` and turns an escaping exception (allocation
// failure on a huge body, an unexpected library throw) into a Status naming `what`, so that
// nothing throws into the HTTP layer.
template <typename Parse>
auto AtExceptionBoundary(std::string_view what, Parse&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError(std::string(what) + ": out of memory while parsing");
  } catch (const std::exception& e) {
    return InternalError(std::string(what) + ": unexpected parser failure: " + e.what());
  }
}

}  // namespace vlmd::serve::api::internal
