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

// The tiled (refined) size of an Idefics3 image at `edge`.
void RefinedSize(const rt::TextEngine& e, const engine::image::Image& img, int32_t edge,
                         int32_t* w, int32_t* h) {
  engine::models::Idefics3RefinedSize(img.width, img.height, e.vision()->config().image_size, edge, w, h);
}

}  // namespace

Result<PreparedJob> PrepareJob(const ModelHost& model, const api::GenerationRequest& request,
                               const PrepareOptions& options, const StreamContextFn& stream) {
  const rt::TextEngine& e = model.engine();
  PreparedJob job;
  JobInput& in = job.input;
  if (!request.image_urls.empty()) {
    // The handler fetches them first (FetchImageUrls); reaching here is a caller bug.
    return InternalError("image URLs were not fetched before preparing the job");
  }
  if (!request.images.empty() && e.vision() == nullptr) {
    return InvalidArgumentError("this model has no vision encoder (served without --mmproj)");
  }
  if (stream && e.vision() == nullptr) {
    return InvalidArgumentError("stream_id: this model has no vision encoder (served without --mmproj)");
  }
  if (stream && request.images.size() > 1) {
    return InvalidArgumentError("stream_id: a stream request carries one frame (got " +
                                std::to_string(request.images.size()) + " images)");
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
  // Decode every image, then choose each one's tiling from its size alone, then preprocess once.
  std::vector<engine::image::Image> decoded;
  std::vector<double> ms(request.images.size(), 0.0);
  for (size_t i = 0; i < request.images.size(); ++i) {
    const std::string& bytes = request.images[i];
    const auto t0 = Clock::now();
    VLMD_ASSIGN_OR_RETURN(engine::image::Image img,
                          engine::image::DecodeImage(
                              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                       bytes.size()),
                              options.decode_limits));
    ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    decoded.push_back(std::move(img));
  }
  // The stream's earlier frames: before the new one, and first to go when over the budget or
  // the context left for the reply.
  int64_t context_tokens = 0;
  if (stream) {
    StreamView view = stream(decoded.empty() ? nullptr : &decoded.front());
    StreamPart part;
    part.id = request.stream_id;
    part.motion = view.motion;
    part.window = view.window;
    part.thumbnail = view.thumbnail;
    part.sequence = view.sequence;
    in.context = std::move(view.context);
    for (const ContextFrame& f : in.context) context_tokens += f.prompt_tokens;
    int64_t own = job.text_tokens;
    for (const auto& img : decoded) {
      own += e.ImageTokens(img.width, img.height, e.vision()->config().preproc_image_size);
    }
    const int64_t limit = std::min<int64_t>(
        options.token_budget, int64_t{e.options().n_ctx} - std::max(request.sampling.max_tokens, 0));
    while (!in.context.empty() && own + context_tokens > limit) {
      context_tokens -= in.context.front().prompt_tokens;
      in.context.erase(in.context.begin());
      ++part.dropped_for_budget;
    }
    part.context_frames = static_cast<int>(in.context.size());
    job.stream = part;
    // One marker per earlier frame, before the first one (no markers: the engine puts every
    // image before the text, in order).
    if (const size_t at = in.prompt.find(api::kMediaMarker); at != std::string::npos) {
      std::string markers;
      for (size_t i = 0; i < in.context.size(); ++i) markers += api::kMediaMarker;
      in.prompt.insert(at, markers);
    }
  }
  // Token budget: while over, shrink the image with the most visual tokens by one tile step of its
  // longest tiled edge (Idefics3); families with a fixed single tile cannot shrink.
  const int32_t min_edge = e.MinLongestEdge();
  const int32_t model_edge = e.vision() ? e.vision()->config().preproc_image_size : 0;
  const int32_t step = e.vision() ? e.vision()->config().image_size : 0;
  std::vector<int32_t> edge(decoded.size(), model_edge);
  auto tokens_at = [&](size_t i, int32_t ed) {
    return e.ImageTokens(decoded[i].width, decoded[i].height, ed);
  };
  int64_t total = job.text_tokens + context_tokens;
  for (size_t i = 0; i < decoded.size(); ++i) total += tokens_at(i, edge[i]);
  int best_first = -1;
  while (total > options.token_budget) {
    int best = -1;
    for (size_t i = 0; i < decoded.size(); ++i) {
      if (min_edge > 0 && edge[i] - step >= min_edge &&
          (best < 0 || tokens_at(i, edge[i]) > tokens_at(best, edge[best]))) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) {
      return ResourceExhaustedError("the prompt needs " + std::to_string(total) +
                                    " tokens, over the token budget of " +
                                    std::to_string(options.token_budget) +
                                    ", and the images cannot be reduced further");
    }
    if (best_first < 0) best_first = best;
    total -= tokens_at(best, edge[best]);
    edge[best] -= step;
    total += tokens_at(best, edge[best]);
  }
  for (size_t i = 0; i < decoded.size(); ++i) {
    rt::ImageTimings t;
    const bool shrunk = edge[i] != model_edge;
    VLMD_ASSIGN_OR_RETURN(rt::PreparedImage img,
                          e.PreprocessDecoded(decoded[i], shrunk ? edge[i] : 0, &t));
    ms[i] += t.preprocess_ms;
    job.image_decode_ms += ms[i];
    in.image_prepare_ms.push_back(ms[i]);
    if (static_cast<int>(i) == best_first) {
      // The tiled size the model would have used, and the one the budget chose.
      int32_t fw = 0, fh = 0;
      RefinedSize(e, decoded[i], model_edge, &fw, &fh);
      job.budget = BudgetAction{{fw, fh},
                                {img.tiles.grid_cols * img.tiles.tile_size,
                                 img.tiles.grid_rows * img.tiles.tile_size}};
    }
    in.images.push_back(std::move(img));
  }
  job.image_tokens = total - job.text_tokens;  // the context frames' included
  if (job.stream && !decoded.empty()) job.stream->frame_tokens = tokens_at(0, edge[0]);
  const api::SamplingRequest& s = request.sampling;
  rt::GenerateParams& p = in.params;
  p.max_tokens = s.max_tokens;
  p.stop = s.stop;
  p.token_stats = true;  // logprobs and trust signals
  p.top_logprobs = request.sampling.top_logprobs;
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
