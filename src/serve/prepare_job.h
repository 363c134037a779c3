// Turns a parsed API request into a scheduler job on the handler's thread: applies the chat
// template, decodes and preprocesses the images (in parallel with the scheduler, SPEC S8),
// and enforces the token budget by tiling images smaller step by step (SPEC S7).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "core/status.h"
#include "engine/image/image.h"
#include "serve/api/requests.h"
#include "serve/job.h"
#include "serve/model_host.h"

namespace vlmd::serve {

struct PrepareOptions {
  int64_t token_budget = 4096;        // text + visual prompt tokens
  engine::image::DecodeLimits decode_limits;  // per image
  Clock::duration timeout = std::chrono::seconds(300);
};

struct BudgetAction {  // what the budget did to the first image that had to shrink
  std::array<int32_t, 2> from{};  // tiled size before
  std::array<int32_t, 2> to{};    // tiled size after
};

struct PreparedJob {
  JobInput input;
  double image_decode_ms = 0;  // decode + preprocess, all images
  int64_t text_tokens = 0;
  int64_t image_tokens = 0;
  std::optional<BudgetAction> budget;
};

// INVALID_ARGUMENT for a request the model cannot take (images without an mmproj, ...);
// the image decoder's errors (DATA_LOSS corrupt, UNIMPLEMENTED unsupported format, OUT_OF_RANGE
// too large); RESOURCE_EXHAUSTED when the prompt cannot fit the budget even at the smallest
// tiling. Thread-safe (only const engine calls).
Result<PreparedJob> PrepareJob(const ModelHost& model, const api::GenerationRequest& request,
                               const PrepareOptions& options);

}  // namespace vlmd::serve
