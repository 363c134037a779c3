// POST /v1/vlm/invoke bodies (JSON and the multipart "request" part) -> GenerationRequest.
// Chat completions live in chat_request.cpp; shared fields in request_fields.cpp.
#include "serve/api/requests.h"

#include <algorithm>
#include <exception>
#include <new>

#include "serve/api/image_inputs.h"
#include "serve/api/json_fields.h"
#include "serve/api/request_fields.h"

namespace vlmd::serve::api {
namespace {

using internal::FieldPath;
using internal::FindField;
using internal::ImageCollector;
using internal::IndexPath;
using internal::Json;
using internal::ReadBool;
using internal::ReadString;

constexpr size_t kMaxStreamIdBytes = 128;

size_t CountMarkers(std::string_view text) {
  size_t n = 0;
  for (size_t pos = text.find(kMediaMarker); pos != std::string_view::npos;
       pos = text.find(kMediaMarker, pos + kMediaMarker.size())) {
    ++n;
  }
  return n;
}

// Everything but the images and the prompt itself: shared fields, raw_prompt, stream_id.
Status ParseInvokeFields(const Json& obj, std::string_view prefix, const RequestLimits& limits,
                         GenerationRequest* req) {
  VLMD_RETURN_IF_ERROR(internal::ParseSharedFields(obj, prefix, limits, req));
  if (const Json* v = FindField(obj, "raw_prompt")) {
    VLMD_ASSIGN_OR_RETURN(req->raw_prompt, ReadBool(*v, FieldPath(prefix, "raw_prompt")));
  }
  if (const Json* v = FindField(obj, "stream_id")) {
    const std::string path = FieldPath(prefix, "stream_id");
    VLMD_ASSIGN_OR_RETURN(const std::string_view id, ReadString(*v, path));
    // It becomes a key in caches, logs and metrics: keep it short and printable.
    if (id.empty() || id.size() > kMaxStreamIdBytes) {
      return InvalidArgumentError(path + ": must be 1 to " + std::to_string(kMaxStreamIdBytes) +
                                  " bytes");
    }
    for (char c : id) {
      if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
        return InvalidArgumentError(path + ": only printable ASCII without spaces is allowed");
      }
    }
    req->stream_id = std::string(id);
  }
  if (const Json* v = FindField(obj, "stream_frame")) {
    const std::string path = FieldPath(prefix, "stream_frame");
    if (req->stream_id.empty()) return InvalidArgumentError(path + ": needs a stream_id");
    VLMD_ASSIGN_OR_RETURN(const int64_t frame, internal::ReadInteger(*v, path));
    if (frame < 0) return InvalidArgumentError(path + ": must not be negative");
    req->stream_frame = frame;
  }
  return Status::Ok();
}

// The prompt becomes the single user message. Markers in it place the images (then there must
// be one per image); without markers the engine puts the images before the text.
Status FinishInvoke(std::string prompt, const std::string& prompt_path, GenerationRequest* req) {
  const size_t n_images = req->images.size();
  if (prompt.empty() && n_images == 0) {
    return InvalidArgumentError(prompt_path + ": must not be empty without an image");
  }
  const size_t markers = CountMarkers(prompt);
  if (markers != 0 && markers != n_images) {
    return InvalidArgumentError(prompt_path + ": has " + std::to_string(markers) + " " +
                                std::string(kMediaMarker) + " markers for " +
                                std::to_string(n_images) + " images");
  }
  req->messages.push_back(ChatMessage{"user", std::move(prompt)});
  return Status::Ok();
}

Result<GenerationRequest> ParseInvokeJsonImpl(std::string_view body, const RequestLimits& limits) {
  VLMD_ASSIGN_OR_RETURN(const Json obj, internal::ParseJsonObject(body, "body"));
  GenerationRequest req;
  VLMD_RETURN_IF_ERROR(ParseInvokeFields(obj, "", limits, &req));
  const Json* prompt_v = FindField(obj, "prompt");
  if (prompt_v == nullptr) return InvalidArgumentError("prompt: missing");
  VLMD_ASSIGN_OR_RETURN(const std::string_view prompt, ReadString(*prompt_v, "prompt"));
  ImageCollector images(limits, &req);
  if (const Json* v = FindField(obj, "image_base64")) {
    VLMD_ASSIGN_OR_RETURN(const std::string_view text, ReadString(*v, "image_base64"));
    VLMD_RETURN_IF_ERROR(images.AddBase64(text, "image_base64"));
  }
  if (const Json* v = FindField(obj, "images_base64")) {
    if (!v->is_array()) return InvalidArgumentError("images_base64: not an array");
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string path = IndexPath("images_base64", i);
      VLMD_ASSIGN_OR_RETURN(const std::string_view text, ReadString((*v)[i], path));
      VLMD_RETURN_IF_ERROR(images.AddBase64(text, path));
    }
  }
  VLMD_RETURN_IF_ERROR(FinishInvoke(std::string(prompt), "prompt", &req));
  return req;
}

Result<GenerationRequest> ParseInvokeMultipartImpl(std::string_view request_json,
                                                   std::vector<std::string> images,
                                                   const RequestLimits& limits) {
  GenerationRequest req;
  std::string prompt;
  if (!request_json.empty()) {
    VLMD_ASSIGN_OR_RETURN(const Json obj, internal::ParseJsonObject(request_json, "request"));
    VLMD_RETURN_IF_ERROR(ParseInvokeFields(obj, "request", limits, &req));
    for (std::string_view key : {"image_base64", "images_base64"}) {
      if (FindField(obj, key) != nullptr) {
        return InvalidArgumentError(FieldPath("request", key) +
                                    ": not allowed in multipart requests (send \"image\" parts)");
      }
    }
    if (const Json* v = FindField(obj, "prompt")) {
      VLMD_ASSIGN_OR_RETURN(const std::string_view p, ReadString(*v, "request.prompt"));
      prompt = std::string(p);
    }
  }
  ImageCollector collector(limits, &req);
  for (size_t i = 0; i < images.size(); ++i) {
    VLMD_RETURN_IF_ERROR(collector.AddBytes(std::move(images[i]), IndexPath("image", i)));
  }
  VLMD_RETURN_IF_ERROR(FinishInvoke(std::move(prompt), "request.prompt", &req));
  return req;
}

}  // namespace

// The public entry points are the module's exception boundary: nothing below is expected to
// throw (JSON errors are caught where they arise), but an allocation failure on a huge body must
// become a Status, never an exception into the HTTP layer.
Result<GenerationRequest> ParseInvokeJson(std::string_view body, const RequestLimits& limits) {
  return internal::AtExceptionBoundary("body", [&] { return ParseInvokeJsonImpl(body, limits); });
}

Result<MultipartParts> SortMultipartParts(
    std::vector<std::pair<std::string, std::string>> parts) {
  MultipartParts out;
  bool have_request = false;
  std::vector<std::pair<int64_t, std::string>> images;  // (order key, bytes); "image" is -1
  for (auto& [name, content] : parts) {
    if (name == "request") {
      if (have_request) return InvalidArgumentError("multipart: more than one \"request\" part");
      have_request = true;
      out.request_json = std::move(content);
      continue;
    }
    const std::string_view digits = std::string_view(name).substr(name.rfind("image", 0) == 0 ? 5 : 0);
    const bool numbered = name.rfind("image", 0) == 0 && !digits.empty() && digits.size() <= 6 &&
                          digits.find_first_not_of("0123456789") == std::string_view::npos;
    if (name != "image" && !numbered) {
      return InvalidArgumentError("multipart: unknown part " + internal::Quote(name) +
                                  " (send \"image\" or \"image<N>\" parts and one \"request\" part)");
    }
    images.emplace_back(numbered ? std::stoll(std::string(digits)) : -1, std::move(content));
  }
  std::stable_sort(images.begin(), images.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [key, bytes] : images) out.images.push_back(std::move(bytes));
  return out;
}

Result<GenerationRequest> ParseInvokeMultipart(std::string_view request_json,
                                               std::vector<std::string> images,
                                               const RequestLimits& limits) {
  return internal::AtExceptionBoundary("request", [&] {
    return ParseInvokeMultipartImpl(request_json, std::move(images), limits);
  });
}

}  // namespace vlmd::serve::api
