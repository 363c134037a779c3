// PrepareJob: template, images and token budget of one request (see prepare_job.h).
#include "serve/prepare_job.h"

#include <algorithm>
#include <string>

namespace vlmd::serve {
namespace {

namespace rt = engine::runtime;

// Prompt text without image markers: what the text part tokenizes to (markers become images).
std::string WithoutMarkers(std::string text) {
  for (size_t at; (at = text.find(api::kMediaMarker)) != std::string::npos;) {
    text.erase(at, api::kMediaMarker.size());
  }
  return text;
}

Result<rt::PreparedImage> Prepare(const rt::TextEngine& e, const std::string& bytes,
                                  const engine::image::DecodeLimits& limits, int32_t edge,
                                  double* ms) {
  rt::ImageTimings t;
  auto p = e.PrepareImage(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), limits,
      edge, &t);
  *ms = t.decode_ms + t.preprocess_ms;
  return p;
}

}  // namespace

Result<PreparedJob> PrepareJob(const ModelHost& model, const api::GenerationRequest& request,
                               const PrepareOptions& options) {
  const rt::TextEngine& e = model.engine();
  PreparedJob job;
  JobInput& in = job.input;
  if (!request.image_urls.empty()) {
    return InvalidArgumentError("fetching image URLs is not supported; send the image as a data: URI");
  }
  if (!request.images.empty() && e.vision() == nullptr) {
    return InvalidArgumentError("this model has no vision encoder (served without --mmproj)");
  }
  if (request.raw_prompt) {
    in.prompt = request.messages.empty() ? std::string() : request.messages.front().text;
  } else {
    std::vector<engine::tokenizer::ChatMessage> msgs;
    for (const api::ChatMessage& m : request.messages) msgs.push_back({m.role, m.text});
    in.prompt = e.ApplyChatTemplate(msgs);
  }
  VLMD_ASSIGN_OR_RETURN(std::vector<int32_t> text_ids,
                        e.tokenizer().Tokenize(WithoutMarkers(in.prompt), true, true));
  job.text_tokens = static_cast<int64_t>(text_ids.size());
  if (job.text_tokens > options.token_budget) {
    return ResourceExhaustedError("the text alone is " + std::to_string(job.text_tokens) +
                                  " tokens, over the token budget of " +
                                  std::to_string(options.token_budget));
  }
  for (const std::string& bytes : request.images) {
    double ms = 0;
    VLMD_ASSIGN_OR_RETURN(rt::PreparedImage img, Prepare(e, bytes, options.decode_limits, 0, &ms));
    in.images.push_back(std::move(img));
    in.image_prepare_ms.push_back(ms);
    job.image_decode_ms += ms;
  }
  // Visual tokens at each image's current tiling; shrink the largest image first, one tile
  // row/column step at a time, until the prompt fits.
  auto tokens_of = [&](const rt::PreparedImage& img) {
    return static_cast<int64_t>(img.tiles.n_tiles) * e.vision()->tokens_per_tile();
  };
  std::vector<int32_t> edge(in.images.size(), 0);  // 0: the model's own tiling
  int64_t total = job.text_tokens;
  for (const auto& img : in.images) total += tokens_of(img);
  const int32_t min_edge = e.MinLongestEdge();
  while (total > options.token_budget) {
    // The image with the most tokens that can still shrink.
    int best = -1;
    for (size_t i = 0; i < in.images.size(); ++i) {
      const auto& t = in.images[i].tiles;
      const int32_t cur = std::max(t.grid_cols, t.grid_rows) * t.tile_size;
      if (min_edge > 0 && cur > min_edge &&
          (best < 0 || tokens_of(in.images[i]) > tokens_of(in.images[best]))) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) {
      return ResourceExhaustedError("the prompt needs " + std::to_string(total) +
                                    " tokens, over the token budget of " +
                                    std::to_string(options.token_budget) +
                                    ", and the images cannot be reduced further");
    }
    rt::PreparedImage& img = in.images[best];
    const int32_t before_w = img.tiles.grid_cols * img.tiles.tile_size;
    const int32_t before_h = img.tiles.grid_rows * img.tiles.tile_size;
    edge[best] = std::max(before_w, before_h) - img.tiles.tile_size;
    double ms = 0;
    VLMD_ASSIGN_OR_RETURN(rt::PreparedImage smaller,
                          Prepare(e, request.images[best], options.decode_limits, edge[best], &ms));
    job.image_decode_ms += ms;
    in.image_prepare_ms[best] += ms;
    total += tokens_of(smaller) - tokens_of(img);
    if (!job.budget) job.budget = BudgetAction{};
    if (job.budget->from == std::array<int32_t, 2>{}) job.budget->from = {before_w, before_h};
    job.budget->to = {smaller.tiles.grid_cols * smaller.tiles.tile_size,
                      smaller.tiles.grid_rows * smaller.tiles.tile_size};
    img = std::move(smaller);
  }
  job.image_tokens = total - job.text_tokens;
  const api::SamplingRequest& s = request.sampling;
  rt::GenerateParams& p = in.params;
  p.max_tokens = s.max_tokens;
  p.stop = s.stop;
  p.token_stats = true;  // logprobs and trust signals
  p.sampling.temperature = s.temperature;
  p.sampling.top_p = s.top_p;
  p.sampling.top_k = s.top_k;
  p.sampling.min_p = s.min_p;
  p.sampling.repeat_penalty = s.repeat_penalty;
  p.sampling.seed = s.seed;
  in.deadline = Clock::now() + options.timeout;
  return job;
}

}  // namespace vlmd::serve
