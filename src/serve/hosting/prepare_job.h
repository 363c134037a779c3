// Turns a parsed API request into a scheduler job on the handler's thread: applies the chat
// template, decodes and preprocesses the images (in parallel with the scheduler, SPEC S8),
// and enforces the token budget by shrinking images in their family's steps (SPEC S7).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "core/status.h"
#include "engine/image/image.h"
#include "serve/api/requests.h"
#include "serve/hosting/job.h"
#include "serve/hosting/model_host.h"
#include "serve/hosting/stream_window.h"
#include "serve/redact/redactor.h"

namespace vlmd::serve {

struct PrepareOptions {
  int64_t token_budget = 4096;        // text + visual prompt tokens
  engine::image::DecodeLimits decode_limits;  // per image
  Clock::duration timeout = std::chrono::seconds(300);
};

struct BudgetAction {  // what the budget did to an image that had to shrink
  int index = 0;                  // the image's place among the request's images
  std::array<int32_t, 2> from{};  // the size the encoder would have seen (models::ImagePlan)
  std::array<int32_t, 2> to{};    // the size the budget chose
};

// A stream's part in a request (SPEC S6): what its window put before the new frame.
struct StreamPart {
  std::string id;  // the request's stream_id
  double motion = 0;
  int window = 1;              // frames the window spans, the new one included
  int context_frames = 0;      // earlier frames in the prompt
  int dropped_for_budget = 0;  // earlier frames left out to fit the token budget (oldest first)
  int dropped_for_allowlist = 0;  // earlier frames left out: their image left the allowlist
  // Why the prompt has no earlier frame (context_frames 0), else empty: "first_frame" (the
  // stream is new here), "lost" (new here, but the client says it sent frames before: a
  // restart, a rebalance to this replica, a hot swap or an idle stream forgotten), "still" (the
  // scene has not moved), "expired" (its frames are older than max_age), "allowlist" (their
  // images left the allowlist), "budget" (left out to fit the token budget).
  std::string no_context_reason;
  // The new frame, for StreamWindows::Push once the request succeeded (no frame: tokens 0).
  int64_t frame_tokens = 0;    // prompt tokens of the new frame (visual and wrapper)
  FrameThumbnail thumbnail{};
  uint64_t sequence = 0;
};

// The request's first image as an earlier step decoded it in full (complexity routing), with its
// decode time: PrepareJob takes it instead of decoding those bytes again where its own decode
// would give the same image (a full-size decode: not a JPEG, or redaction on).
struct DecodedImage {
  engine::image::Image image;
  double decode_ms = 0;
};
// DecodeImage of `bytes` under `limits`, timed.
Result<DecodedImage> DecodeTimed(const std::string& bytes,
                                 const engine::image::DecodeLimits& limits);

// Called by PrepareJob for a request on a stream, with its frame (the request's one image,
// decoded; nullptr when it has none): returns the stream's earlier frames to put before it.
using StreamContextFn = std::function<StreamView(const engine::image::Image* frame)>;

struct PreparedJob {
  JobInput input;
  double image_decode_ms = 0;  // decode + preprocess, all images
  int64_t text_tokens = 0;
  int64_t image_tokens = 0;
  // Every image that shrank, in request order; budget_first: the one the budget made smaller
  // first (the reply's top-level entry), an index into `budget`.
  std::vector<BudgetAction> budget;
  size_t budget_first = 0;
  std::optional<StreamPart> stream;
  // With a redactor: what it covered in the request's images (regions not kept) and its time.
  std::optional<redact::Redaction> redaction;
  Clock::time_point redact_start{}, redact_end{};  // when it ran (trace span)
};

// INVALID_ARGUMENT for a request the model cannot take (images without an mmproj, ...);
// the image decoder's errors (DATA_LOSS corrupt, UNIMPLEMENTED unsupported format, OUT_OF_RANGE
// too large); RESOURCE_EXHAUSTED when the prompt cannot fit the budget even with every
// image at its smallest. Thread-safe (only const engine calls). With `stream` (a request with a stream_id), the
// earlier frames it returns go before the request's image (an image marker each when the prompt
// has markers), and count towards the token budget: over it, the oldest are left out first,
// before the new frame shrinks. INVALID_ARGUMENT for a stream request with more than
// one image. With `redactors`, faces and plates are covered in each decoded image, by each in
// order, before anything else sees it. `first` (optional): the first image already decoded in full.
// Whether PrepareJob refused the request because its prompt leaves the model's context no room
// for the reply (RESOURCE_EXHAUSTED, as the token budget's refusal; the chat endpoint answers it
// as OpenAI does: 400 context_length_exceeded). Its message holds kContextOverflowText.
inline constexpr std::string_view kContextOverflowText = " the context of ";
bool IsContextOverflow(const Status& status);

Result<PreparedJob> PrepareJob(const ModelHost& model, const api::GenerationRequest& request,
                               const PrepareOptions& options, const StreamContextFn& stream = {},
                               std::span<const redact::Redactor* const> redactors = {},
                               std::optional<DecodedImage> first = std::nullopt);

}  // namespace vlmd::serve
