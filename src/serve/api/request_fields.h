// Private to serve/api: the fields both generation endpoints share ("model", "stream", "n" and
// the sampling parameters), validated into GenerationRequest / SamplingRequest.
#pragma once

#include <string_view>

#include "core/status.h"
#include "serve/api/json_fields.h"
#include "serve/api/requests.h"

namespace vlmd::serve::api::internal {

// Bounds not configurable through RequestLimits (they follow OpenAI's documented ranges).
inline constexpr double kMaxTemperature = 2.0;
inline constexpr double kMinRepeatPenalty = 0.001;
inline constexpr double kMaxRepeatPenalty = 10.0;
inline constexpr int64_t kMaxTopLogprobs = 20;
inline constexpr size_t kMaxModelNameBytes = 256;

// Reads the shared fields of object `obj` (field paths are prefixed with `prefix`, "" at top
// level) into `req` (model, stream, sampling); unknown fields are ignored. INVALID_ARGUMENT for
// a wrong type or value, OUT_OF_RANGE for max_tokens above limits.max_tokens_limit.
Status ParseSharedFields(const Json& obj, std::string_view prefix, const RequestLimits& limits,
                         GenerationRequest* req);

// Only the sampling parameters (max_tokens / max_completion_tokens, temperature, top_p, top_k,
// min_p, repeat_penalty, seed, stop, logprobs, top_logprobs); same errors as above.
Status ParseSampling(const Json& obj, std::string_view prefix, const RequestLimits& limits,
                     SamplingRequest* out);

}  // namespace vlmd::serve::api::internal
