// Validation of the fields shared by /v1/vlm/invoke and /v1/chat/completions (request_fields.h).
#include "serve/api/request_fields.h"

#include <algorithm>
#include <limits>
#include <string>

namespace vlmd::serve::api::internal {
namespace {

// A number in [lo, hi] (or (lo, hi] when lo_open); `range` spells the interval for the message.
Status ReadBoundedNumber(const Json& obj, std::string_view prefix, std::string_view key, double lo,
                         bool lo_open, double hi, std::string_view range, float* out) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return Status::Ok();
  const std::string path = FieldPath(prefix, key);
  VLMD_ASSIGN_OR_RETURN(const double d, ReadNumber(*v, path));
  if (d > hi || d < lo || (lo_open && d == lo)) {
    return InvalidArgumentError(path + ": must be in " + std::string(range));
  }
  *out = static_cast<float>(d);
  return Status::Ok();
}

Status ReadMaxTokens(const Json& obj, std::string_view prefix, std::string_view key,
                     const RequestLimits& limits, int32_t* out) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return Status::Ok();
  const std::string path = FieldPath(prefix, key);
  // Over the limit is a bad parameter (HTTP 400, as OpenAI answers), not a too-large payload.
  auto n = ReadInteger(*v, path);
  if (!n.ok()) return InvalidArgumentError(n.status().message());
  if (*n < 1) return InvalidArgumentError(path + ": must be at least 1");
  if (*n > limits.max_tokens_limit) {
    return InvalidArgumentError(path + ": " + std::to_string(*n) + " exceeds the limit of " +
                                std::to_string(limits.max_tokens_limit));
  }
  *out = static_cast<int32_t>(*n);
  return Status::Ok();
}

Status ReadStop(const Json& obj, std::string_view prefix, const RequestLimits& limits,
                std::vector<std::string>* out) {
  const Json* v = FindField(obj, "stop");
  if (v == nullptr) return Status::Ok();
  const std::string path = FieldPath(prefix, "stop");
  auto add = [&](const Json& s, const std::string& spath) -> Status {
    VLMD_ASSIGN_OR_RETURN(const std::string_view text, ReadString(s, spath));
    if (text.empty()) return InvalidArgumentError(spath + ": empty stop string");
    if (text.size() > limits.max_stop_length) {
      return InvalidArgumentError(spath + ": longer than " +
                                  std::to_string(limits.max_stop_length) + " bytes");
    }
    out->emplace_back(text);
    return Status::Ok();
  };
  out->clear();
  if (v->is_string()) return add(*v, path);
  if (!v->is_array()) return InvalidArgumentError(path + ": not a string or an array of strings");
  if (v->size() > static_cast<size_t>(std::max<int32_t>(limits.max_stop_strings, 0))) {
    return InvalidArgumentError(path + ": at most " + std::to_string(limits.max_stop_strings) +
                                " stop strings");
  }
  for (size_t i = 0; i < v->size(); ++i) VLMD_RETURN_IF_ERROR(add((*v)[i], IndexPath(path, i)));
  return Status::Ok();
}

}  // namespace

Status ParseSampling(const Json& obj, std::string_view prefix, const RequestLimits& limits,
                     SamplingRequest* out) {
  SamplingRequest s;
  // The default must itself be acceptable when the operator configured a smaller limit.
  s.max_tokens =
      std::clamp<int32_t>(s.max_tokens, 1, std::max<int32_t>(limits.max_tokens_limit, 1));
  // OpenAI renamed max_tokens to max_completion_tokens; the newer name wins when both are sent.
  // llama.cpp's n_predict counts too, below both; its -1 ("until the end") is the default here.
  const Json* n_predict = FindField(obj, "n_predict");
  const bool n_predict_default =
      n_predict != nullptr && n_predict->is_number_integer() && n_predict->get<int64_t>() == -1;
  if (!n_predict_default) {
    VLMD_RETURN_IF_ERROR(ReadMaxTokens(obj, prefix, "n_predict", limits, &s.max_tokens));
  }
  VLMD_RETURN_IF_ERROR(ReadMaxTokens(obj, prefix, "max_tokens", limits, &s.max_tokens));
  VLMD_RETURN_IF_ERROR(ReadMaxTokens(obj, prefix, "max_completion_tokens", limits, &s.max_tokens));
  for (std::string_view key : {"n_predict", "max_tokens", "max_completion_tokens"}) {
    if (const Json* v = FindField(obj, key); v != nullptr && !v->is_null()) {
      s.has_max_tokens |= !(key == "n_predict" && n_predict_default);
    }
  }
  VLMD_RETURN_IF_ERROR(ReadBoundedNumber(obj, prefix, "temperature", 0.0, false, kMaxTemperature,
                                         "[0, 2]", &s.temperature));
  // top_p 0 keeps the most likely token only (OpenAI takes [0, 1]; llama.cpp keeps one token).
  VLMD_RETURN_IF_ERROR(ReadBoundedNumber(obj, prefix, "top_p", 0.0, false, 1.0, "[0, 1]", &s.top_p));
  VLMD_RETURN_IF_ERROR(
      ReadBoundedNumber(obj, prefix, "min_p", 0.0, false, 1.0, "[0, 1]", &s.min_p));
  // From 0.001: a penalty near float's smallest made the penalized logits infinite (NaN
  // probabilities, the last token always chosen), and one below it became 0 as a float.
  VLMD_RETURN_IF_ERROR(ReadBoundedNumber(obj, prefix, "repeat_penalty", kMinRepeatPenalty, false,
                                         kMaxRepeatPenalty, "[0.001, 10]", &s.repeat_penalty));
  if (const Json* v = FindField(obj, "top_k")) {
    const std::string path = FieldPath(prefix, "top_k");
    VLMD_ASSIGN_OR_RETURN(const int64_t k, ReadInteger(*v, path));
    if (k < 0) return InvalidArgumentError(path + ": must be at least 0");
    // Any k at or above the vocabulary size means "off"; clamping keeps that meaning.
    s.top_k = static_cast<int32_t>(std::min<int64_t>(k, std::numeric_limits<int32_t>::max()));
  }
  if (const Json* v = FindField(obj, "repeat_last_n")) {
    const std::string path = FieldPath(prefix, "repeat_last_n");
    VLMD_ASSIGN_OR_RETURN(const int64_t n, ReadInteger(*v, path));
    if (n < -1) return InvalidArgumentError(path + ": must be at least -1 (the whole context)");
    // As llama.cpp: 0 turns the penalty off, -1 looks back over the whole context.
    s.repeat_last_n = n == -1 ? std::numeric_limits<int32_t>::max()
                              : static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
  }
  if (const Json* v = FindField(obj, "seed")) {
    const std::string path = FieldPath(prefix, "seed");
    // A negative seed, written as an integer or as a float of integer value (-1.0 from a client
    // that keeps numbers as doubles).
    const bool negative = (v->is_number_integer() && !v->is_number_unsigned()) ||
                          (v->is_number_float() && v->get<double>() < 0);
    if (negative) {
      // OpenAI's seed is any 64-bit integer; llama.cpp's -1 asks for a random one (as absent).
      VLMD_ASSIGN_OR_RETURN(const int64_t seed, ReadInteger(*v, path));
      if (seed != -1) {
        s.seed = static_cast<uint64_t>(seed);
        s.has_seed = true;
      }
    } else {
      VLMD_ASSIGN_OR_RETURN(s.seed, ReadUnsigned(*v, path));
      s.has_seed = true;
    }
  }
  // llama.cpp samplers vlmd does not have: refused by name rather than ignored.
  if (const Json* v = FindField(obj, "mirostat"); v != nullptr && !v->is_null() && *v != 0) {
    return InvalidArgumentError(FieldPath(prefix, "mirostat") + ": mirostat sampling is not supported by this server");
  }
  if (const Json* v = FindField(obj, "typical_p"); v != nullptr && !v->is_null() && *v != 1 && *v != 1.0) {
    return InvalidArgumentError(FieldPath(prefix, "typical_p") + ": typical sampling is not supported by this server");
  }
  VLMD_RETURN_IF_ERROR(ReadStop(obj, prefix, limits, &s.stop));
  if (const Json* v = FindField(obj, "logprobs")) {
    VLMD_ASSIGN_OR_RETURN(s.logprobs, ReadBool(*v, FieldPath(prefix, "logprobs")));
  }
  if (const Json* v = FindField(obj, "top_logprobs")) {
    const std::string path = FieldPath(prefix, "top_logprobs");
    VLMD_ASSIGN_OR_RETURN(const int64_t k, ReadInteger(*v, path));
    if (k < 0 || k > kMaxTopLogprobs) return InvalidArgumentError(path + ": must be in [0, 20]");
    if (k > 0 && !s.logprobs) return InvalidArgumentError(path + ": requires \"logprobs\": true");
    s.top_logprobs = static_cast<int32_t>(k);
  }
  *out = std::move(s);
  return Status::Ok();
}

Status ParseSharedFields(const Json& obj, std::string_view prefix, const RequestLimits& limits,
                         GenerationRequest* req) {
  if (const Json* v = FindField(obj, "model")) {
    const std::string path = FieldPath(prefix, "model");
    VLMD_ASSIGN_OR_RETURN(const std::string_view model, ReadString(*v, path));
    if (model.size() > kMaxModelNameBytes) {
      return InvalidArgumentError(path + ": longer than " + std::to_string(kMaxModelNameBytes) +
                                  " bytes");
    }
    req->model = std::string(model);
  }
  if (const Json* v = FindField(obj, "stream")) {
    VLMD_ASSIGN_OR_RETURN(req->stream, ReadBool(*v, FieldPath(prefix, "stream")));
  }
  if (const Json* v = FindField(obj, "n")) {
    const std::string path = FieldPath(prefix, "n");
    VLMD_ASSIGN_OR_RETURN(const int64_t n, ReadInteger(*v, path));
    if (n != 1) return InvalidArgumentError(path + ": only n=1 is supported");
  }
  return ParseSampling(obj, prefix, limits, &req->sampling);
}

}  // namespace vlmd::serve::api::internal
