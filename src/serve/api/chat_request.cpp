// POST /v1/chat/completions (OpenAI shape) -> GenerationRequest: messages with text and image
// parts flattened to text in which each image is kMediaMarker, images collected in that order.
#include <exception>
#include <new>

#include "serve/api/image_inputs.h"
#include "serve/api/json_fields.h"
#include "serve/api/request_fields.h"
#include "serve/api/requests.h"

namespace vlmd::serve::api {
namespace {

using internal::FieldPath;
using internal::FindField;
using internal::ImageCollector;
using internal::IndexPath;
using internal::Json;
using internal::Quote;
using internal::ReadString;

// Client text must not contain the marker itself: the engine would count it as an image slot,
// so a user could shift images between messages or make the request fail late. Only an
// occurrence that reaches into the new text can be new (a real marker ends where text starts;
// adjacent text parts are joined with a newline, which no marker contains).
Status AppendText(std::string_view text, const std::string& path, std::string* out) {
  const size_t old_size = out->size();
  out->append(text);
  const size_t overlap = kMediaMarker.size() - 1;
  const size_t from = old_size >= overlap ? old_size - overlap : 0;
  if (out->find(kMediaMarker, from) != std::string::npos) {
    return InvalidArgumentError(path + ": must not contain " + std::string(kMediaMarker) +
                                " (alone or joined with the previous text part)");
  }
  return Status::Ok();
}

Result<std::string> ParseRole(const Json& msg, const std::string& path) {
  const Json* v = FindField(msg, "role");
  const std::string role_path = FieldPath(path, "role");
  if (v == nullptr) return InvalidArgumentError(role_path + ": missing");
  VLMD_ASSIGN_OR_RETURN(const std::string_view role, ReadString(*v, role_path));
  if (role == "system" || role == "user" || role == "assistant") return std::string(role);
  // OpenAI's newer name for system instructions (sent for its reasoning models).
  if (role == "developer") return std::string("system");
  if (role == "tool" || role == "function") {
    return InvalidArgumentError(role_path + ": " + Quote(role) +
                                " messages are not supported (no tool calling)");
  }
  return InvalidArgumentError(role_path + ": unknown role " + Quote(role));
}

// One content part: {"type": "text", "text"} or {"type": "image_url", "image_url": {"url"}}
// (a bare string image_url is accepted too, as some clients send it). Consecutive text parts are
// joined with "\n", as llama.cpp joins them (they ran together: "scene.Answer"), but not after
// nothing (a leading empty part); *last_was_text says what the previous part was, and is updated.
Status ParsePart(const Json& part, const std::string& path, bool images_allowed,
                 ImageCollector* images, std::string* text, bool* last_was_text) {
  if (!part.is_object()) return InvalidArgumentError(path + ": not an object");
  const Json* type_v = FindField(part, "type");
  const std::string type_path = FieldPath(path, "type");
  if (type_v == nullptr) return InvalidArgumentError(type_path + ": missing");
  VLMD_ASSIGN_OR_RETURN(const std::string_view type, ReadString(*type_v, type_path));
  if (type == "text") {
    const std::string text_path = FieldPath(path, "text");
    const Json* t = FindField(part, "text");
    if (t == nullptr) return InvalidArgumentError(text_path + ": missing");
    VLMD_ASSIGN_OR_RETURN(const std::string_view s, ReadString(*t, text_path));
    if (*last_was_text && !text->empty()) text->push_back('\n');
    *last_was_text = true;
    return AppendText(s, text_path, text);
  }
  if (type != "image_url") {
    return InvalidArgumentError(type_path + ": unsupported content part type " + Quote(type));
  }
  if (!images_allowed) {
    return InvalidArgumentError(path + ": image parts are only allowed in user messages");
  }
  std::string url_path = FieldPath(path, "image_url");
  const Json* iu = FindField(part, "image_url");
  if (iu == nullptr) return InvalidArgumentError(url_path + ": missing");
  const Json* url_v = iu;
  if (iu->is_object()) {
    url_path = FieldPath(url_path, "url");
    url_v = FindField(*iu, "url");
    if (url_v == nullptr) return InvalidArgumentError(url_path + ": missing");
  } else if (!iu->is_string()) {
    return InvalidArgumentError(url_path + ": not an object");
  }
  VLMD_ASSIGN_OR_RETURN(const std::string_view url, ReadString(*url_v, url_path));
  VLMD_RETURN_IF_ERROR(images->AddUrl(url, url_path));
  text->append(kMediaMarker);
  *last_was_text = false;
  return Status::Ok();
}

Result<ChatMessage> ParseMessage(const Json& msg, const std::string& path, ImageCollector* images) {
  if (!msg.is_object()) return InvalidArgumentError(path + ": not an object");
  ChatMessage out;
  VLMD_ASSIGN_OR_RETURN(out.role, ParseRole(msg, path));
  const std::string content_path = FieldPath(path, "content");
  const Json* content = FindField(msg, "content");
  if (content == nullptr) {
    // `"content": null` is empty content in any role, as llama.cpp reads it (an assistant turn
    // that only carried tool calls has it); without the key only an assistant turn is empty.
    if (out.role == "assistant" || msg.contains("content")) return out;
    return InvalidArgumentError(content_path + ": missing");
  }
  if (content->is_string()) {
    VLMD_RETURN_IF_ERROR(
        AppendText(content->get_ref<const Json::string_t&>(), content_path, &out.text));
    return out;
  }
  if (!content->is_array())
    return InvalidArgumentError(content_path + ": not a string or an array");
  bool last_was_text = false;
  for (size_t i = 0; i < content->size(); ++i) {
    VLMD_RETURN_IF_ERROR(ParsePart((*content)[i], IndexPath(content_path, i), out.role == "user",
                                   images, &out.text, &last_was_text));
  }
  return out;
}

// OpenAI fields that change what a reply is and that vlmd does not implement: refused naming the
// field rather than ignored (a client asking for a tool call or a JSON object must not get plain
// text as if it had). Harmless fields (user, store, metadata, ...) stay ignored; a field at its
// no-op value (tool_choice: "none", response_format text, empty logit_bias) is accepted. (n > 1
// is refused with the sampling fields.)
Status RefuseUnimplementedFields(const Json& obj) {
  auto present = [&](std::string_view key) {
    const Json* v = FindField(obj, key);
    return v != nullptr && !v->is_null() ? v : nullptr;
  };
  auto refuse = [](std::string_view key, std::string_view what) {
    return InvalidArgumentError(std::string(key) + ": " + std::string(what) +
                                " is not supported by this server");
  };
  for (std::string_view key : {"tools", "functions"}) {
    if (const Json* v = present(key); v && !(v->is_array() && v->empty())) {
      return refuse(key, "tool calling");
    }
  }
  for (std::string_view key : {"tool_choice", "function_call"}) {
    if (const Json* v = present(key); v && !(v->is_string() && v->get_ref<const Json::string_t&>() == "none")) {
      return refuse(key, "tool calling");
    }
  }
  if (const Json* v = present("response_format")) {
    const Json* type = v->is_object() ? FindField(*v, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get_ref<const Json::string_t&>() != "text") {
      return refuse("response_format", "a response format other than {\"type\": \"text\"}");
    }
  }
  if (const Json* v = present("logit_bias"); v && !(v->is_object() && v->empty())) {
    return refuse("logit_bias", "logit bias");
  }
  if (present("audio")) return refuse("audio", "audio output");
  if (const Json* v = present("modalities");
      v && !(v->is_array() && v->size() == 1 && (*v)[0] == "text")) {
    return refuse("modalities", "an output modality other than text");
  }
  if (present("prediction")) return refuse("prediction", "predicted output");
  // Penalties vlmd has no sampler step for (its repeat_penalty is llama.cpp's, a different one):
  // accepted at their no-op value 0 only.
  for (std::string_view key : {"presence_penalty", "frequency_penalty"}) {
    if (const Json* v = present(key); v && !(v->is_number() && v->get<double>() == 0.0)) {
      return refuse(key, "a " + std::string(key.substr(0, key.find('_'))) +
                             " penalty other than 0 (use repeat_penalty)");
    }
  }
  return Status::Ok();
}

Result<GenerationRequest> ParseChatImpl(std::string_view body, const RequestLimits& limits) {
  VLMD_ASSIGN_OR_RETURN(const Json obj, internal::ParseJsonObject(body, "body"));
  VLMD_RETURN_IF_ERROR(RefuseUnimplementedFields(obj));
  GenerationRequest req;
  VLMD_RETURN_IF_ERROR(internal::ParseSharedFields(obj, "", limits, &req));
  if (const Json* so = FindField(obj, "stream_options")) {
    const auto usage = so->is_object() ? so->find("include_usage") : so->end();
    if (!so->is_object() || (usage != so->end() && !usage->is_boolean())) {
      return InvalidArgumentError("stream_options: expected {\"include_usage\": true|false}");
    }
    if (!req.stream) {  // as OpenAI answers
      return InvalidArgumentError("stream_options: only allowed when \"stream\" is true");
    }
    req.include_usage = usage != so->end() && usage->get<bool>();
  }
  const Json* messages = FindField(obj, "messages");
  if (messages == nullptr) return InvalidArgumentError("messages: missing");
  if (!messages->is_array()) return InvalidArgumentError("messages: not an array");
  if (messages->empty()) return InvalidArgumentError("messages: must not be empty");
  ImageCollector images(limits, &req);
  req.messages.reserve(messages->size());
  for (size_t i = 0; i < messages->size(); ++i) {
    VLMD_ASSIGN_OR_RETURN(ChatMessage m,
                          ParseMessage((*messages)[i], IndexPath("messages", i), &images));
    req.messages.push_back(std::move(m));
  }
  return req;
}

}  // namespace

// The exception boundary (see ParseInvokeJson in requests.cpp).
Result<GenerationRequest> ParseChatCompletion(std::string_view body, const RequestLimits& limits) {
  return internal::AtExceptionBoundary("body", [&] { return ParseChatImpl(body, limits); });
}

}  // namespace vlmd::serve::api
