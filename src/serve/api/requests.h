// Parsed, validated requests of the two generation endpoints. Parsing is pure (no I/O, no
// engine): it turns untrusted bytes into these value types or a Status naming what is wrong.
//  - POST /v1/vlm/invoke: application/json {"prompt", "image_base64"?, "images_base64"?: [...],
//    "max_tokens"?, "temperature"?, "top_p"?, "top_k"?, "min_p"?, "seed"?, "stop"?, "stream"?,
//    "raw_prompt"?, "logprobs"?}; or multipart/form-data whose "request" part is that JSON
//    (without base64 images) and whose "image" part(s) carry the encoded image bytes.
//  - POST /v1/chat/completions (OpenAI): {"model"?, "messages": [{"role", "content": string |
//    [{"type": "text", "text"} | {"type": "image_url", "image_url": {"url": "data:...;base64,..."
//    | "http(s)://..."}}]}], "max_tokens"? | "max_completion_tokens"?, "temperature"?, "top_p"?,
//    "seed"?, "stop"? (string or array), "stream"?, "logprobs"?, "top_logprobs"?}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlmd::serve::api {

struct RequestLimits {
  int32_t max_images = 8;                // per request
  size_t max_image_bytes = 20u << 20;    // encoded bytes per image (after base64 decoding)
  int32_t max_tokens_limit = 4096;       // upper bound accepted for max_tokens
  int32_t max_stop_strings = 8;
  size_t max_stop_length = 64;
  std::vector<std::string> url_host_allowlist;  // http(s) image URLs: empty = all refused
};

struct SamplingRequest {
  int32_t max_tokens = 128;   // default when absent
  float temperature = 0.0f;   // 0 = greedy (default: deterministic)
  float top_p = 1.0f;
  int32_t top_k = 0;          // 0 = off
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;  // tokens the penalty looks back over (llama.cpp's default)
  uint64_t seed = 0;
  bool has_seed = false;        // absent: every request its own random seed
  bool has_max_tokens = false;  // absent: max_tokens, or what the context has left if less
  std::vector<std::string> stop;
  bool logprobs = false;
  int32_t top_logprobs = 0;
};

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string text;     // text parts joined; each image part becomes the media marker in place
};

// A generation request from either endpoint, normalized.
struct GenerationRequest {
  std::string model;                        // requested model name ("" = default)
  std::vector<ChatMessage> messages;        // chat: the conversation; invoke: one user message
  bool raw_prompt = false;                  // invoke only: the prompt is used as is
  std::vector<std::string> images;          // encoded image bytes, in marker order
  std::vector<std::string> image_urls;      // http(s) URLs that passed the allowlist (not fetched here)
  // For each image_urls[i], the index of its marker among all media markers of the request
  // (0-based, in text order); `images` fill the remaining marker positions in order.
  std::vector<int32_t> image_url_positions;
  SamplingRequest sampling;
  bool stream = false;
  bool include_usage = false;               // chat: stream_options.include_usage (stream only)
  std::string stream_id;                    // optional client stream (camera) id
  // Optional with stream_id: the client's count of frames it sent on the stream before this one
  // (0 for the first). A server that holds none of them says the stream was lost (a restart, a
  // rebalance to another replica) instead of starting the window again silently. -1: not sent.
  int64_t stream_frame = -1;
};

// The marker each image part becomes inside ChatMessage::text (the engine's default marker).
inline constexpr std::string_view kMediaMarker = "<__media__>";

// INVALID_ARGUMENT (malformed JSON, wrong types, bad values, bad base64 / data URI) naming the
// field; OUT_OF_RANGE when a limit (images, bytes, max_tokens) is exceeded.
Result<GenerationRequest> ParseInvokeJson(std::string_view body, const RequestLimits& limits);
// The parts of a multipart invoke request, by name as received (name, content): "request" (at
// most one) and the images, "image" parts in the order sent, then "image<N>" parts by N. Any
// other part is INVALID_ARGUMENT naming it (a misnamed image must not be dropped silently).
struct MultipartParts {
  std::string request_json;  // empty when no "request" part
  std::vector<std::string> images;
};
Result<MultipartParts> SortMultipartParts(
    std::vector<std::pair<std::string, std::string>> parts);
// Multipart variant: `request_json` is the "request" part (may be empty: then prompt is ""),
// `images` the image parts' bytes.
Result<GenerationRequest> ParseInvokeMultipart(std::string_view request_json,
                                               std::vector<std::string> images,
                                               const RequestLimits& limits);
Result<GenerationRequest> ParseChatCompletion(std::string_view body, const RequestLimits& limits);

// Strict standard base64 (RFC 4648 alphabet, '=' padding optional, whitespace not allowed);
// OUT_OF_RANGE when the decoded size would exceed max_bytes (checked before decoding).
Result<std::string> DecodeBase64(std::string_view text, size_t max_bytes);
std::string EncodeBase64(std::string_view bytes);

// "data:<mime>;base64,<payload>" -> decoded bytes. INVALID_ARGUMENT for other forms.
Result<std::string> DecodeDataUri(std::string_view uri, size_t max_bytes);

}  // namespace vlmd::serve::api
