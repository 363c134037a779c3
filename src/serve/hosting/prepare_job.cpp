// PrepareJob: template, images and token budget of one request (see prepare_job.h).
#include "serve/hosting/prepare_job.h"

#include <algorithm>
#include <cctype>
#include <random>
#include <string>

namespace vlmd::serve {
namespace {

namespace rt = engine::runtime;

// StreamPart::no_context_reason for a request whose prompt got no earlier frame, from what the
// stream holds here (StreamView's held_frames and expired) and the request's stream_frame (-1:
// not sent).
std::string NoContextReason(const StreamPart& part, int held_frames, bool expired, int64_t client_frame) {
  if (held_frames == 0) return client_frame > 0 ? "lost" : "first_frame";
  if (expired) return "expired";
  if (part.dropped_for_budget > 0) return "budget";
  if (part.dropped_for_allowlist > 0) return "allowlist";
  return "still";  // a window of one frame: the scene has not moved
}

// Prompt text without image markers: what the text part tokenizes to (markers become images).
engine::tokenizer::PromptText WithoutMarkers(engine::tokenizer::PromptText prompt) {
  prompt.EraseAll(api::kMediaMarker);
  return prompt;
}

// The context rows a request keeps for its reply: max_tokens when given, else at least one.
int64_t ReplyReserve(const api::GenerationRequest& request) {
  return request.sampling.has_max_tokens ? std::max<int64_t>(request.sampling.max_tokens, 0) : 1;
}

// Whether a JPEG of `full` size may decode at `reduced` (a DCT scale) for this model: its
// preprocessing must plan the same image from both, at every token-budget level (target size,
// tiles, rows: the families' rules round, and the reduced image's slightly different aspect
// ratio could pick another grid), and the reduced pixels must cover the largest target.
bool ReducedSizePlansAsFull(const rt::VlmEngine& e, engine::image::ImageSize full,
                            engine::image::ImageSize reduced) {
  const std::vector<engine::models::ImagePlan> full_plans = e.PlanLevels(full.width, full.height);
  const std::vector<engine::models::ImagePlan> reduced_plans =
      e.PlanLevels(reduced.width, reduced.height);
  if (full_plans.empty() || full_plans.size() != reduced_plans.size()) return false;
  if (reduced.width < full_plans[0].width || reduced.height < full_plans[0].height) return false;
  for (size_t level = 0; level < full_plans.size(); ++level) {
    const engine::models::ImagePlan& a = full_plans[level];
    const engine::models::ImagePlan& b = reduced_plans[level];
    if (a.width != b.width || a.height != b.height || a.rows != b.rows ||
        a.work_units != b.work_units || a.layout.width != b.layout.width ||
        a.layout.height != b.layout.height || a.layout.grid_cols != b.layout.grid_cols ||
        a.layout.grid_rows != b.layout.grid_rows || a.layout.n_tiles != b.layout.n_tiles ||
        a.layout.has_global != b.layout.has_global) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool IsContextOverflow(const Status& status) {
  return status.code() == StatusCode::kResourceExhausted &&
         status.message().find(kContextOverflowText) != std::string::npos;
}

Result<DecodedImage> DecodeTimed(const std::string& bytes,
                                 const engine::image::DecodeLimits& limits) {
  const auto t0 = Clock::now();
  VLMD_ASSIGN_OR_RETURN(
      engine::image::Image img,
      engine::image::DecodeImage(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
          limits));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return DecodedImage{std::move(img), ms};
}

Result<PreparedJob> PrepareJob(const ModelHost& model, const api::GenerationRequest& request,
                               const PrepareOptions& options, const StreamContextFn& stream,
                               std::span<const redact::Redactor* const> redactors,
                               std::optional<DecodedImage> first) {
  const rt::VlmEngine& e = model.engine();
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
  // Images of a prompt without markers (the invoke API's "prompt") go at the start of the last
  // user message, inside the chat turn, as llama.cpp's mtmd places them; they went before the
  // whole template. A stream request without a frame gets one marker there standing for its
  // earlier frames (`placeholder`), replaced by theirs below.
  bool placeholder = false;
  if (request.raw_prompt) {
    // The client writes the whole prompt, the template's markers too: parsed as it is.
    in.prompt = request.messages.empty() ? std::string() : request.messages.front().text;
  } else {
    std::vector<engine::tokenizer::ChatMessage> msgs;
    for (const api::ChatMessage& m : request.messages) msgs.push_back({m.role, m.text});
    // A trailing assistant message is the start of the reply, to be continued (llama-server's
    // prefill_assistant, on by default): the messages before it are templated with the
    // assistant's opening, its text follows as it is; it was closed as a finished turn.
    std::string continuation;
    if (!msgs.empty() && msgs.back().role == "assistant") {
      if (msgs.size() >= 2 && msgs[msgs.size() - 2].role == "assistant") {
        return InvalidArgumentError(
            "messages: two or more assistant messages at the end (only the last one can be "
            "continued)");
      }
      continuation = std::move(msgs.back().content);
      msgs.pop_back();
    }
    const bool has_marker = std::any_of(msgs.begin(), msgs.end(), [](const auto& m) {
      return m.content.find(api::kMediaMarker) != std::string::npos;
    });
    const size_t own = request.images.size(), leading = own > 0 ? own : (stream ? 1 : 0);
    auto user = std::find_if(msgs.rbegin(), msgs.rend(), [](const auto& m) { return m.role == "user"; });
    // (No user turn: the engine's rule for marker-less rows applies, images before the text.)
    if (!has_marker && leading > 0 && user != msgs.rend()) {
      std::string markers;
      for (size_t i = 0; i < leading; ++i) markers += api::kMediaMarker;
      user->content.insert(0, markers);
      placeholder = own == 0;
    }
    // The messages' words, and the continued reply's, are read as text: a "<|im_end|>" in
    // them cannot close the turn (engine::tokenizer::PromptText).
    in.prompt = e.ApplyChatTemplate(msgs);
    in.prompt.AppendLiteral(continuation);
  }
  // A text longer than the budget's worth of the vocabulary's longest tokens is over the budget
  // whatever it tokenizes to: refused before the tokenizer, whose pre-split holds tens of times
  // the text's bytes (a 31 MB prompt took 1.6 GB and 5 s to be refused). The factor 2 is a
  // margin: image markers are cut out before the text is tokenized. With tokens that swallow the
  // whitespace beside them (Phi-3's), only the other bytes count: one such token may cover any
  // run of whitespace, nothing else.
  const size_t longest = e.tokenizer().vocab().max_token_bytes();
  const std::string& prompt_bytes = in.prompt.text();
  const size_t counted =
      e.tokenizer().vocab().has_strip_tokens()
          ? static_cast<size_t>(std::count_if(prompt_bytes.begin(), prompt_bytes.end(), [](char c) {
              return std::isspace(static_cast<unsigned char>(c)) == 0;
            }))
          : prompt_bytes.size();
  if (counted > 2 * longest * static_cast<size_t>(std::max<int64_t>(options.token_budget, 1))) {
    return ResourceExhaustedError("the text alone is " + std::to_string(in.prompt.size()) +
                                  " bytes, more tokens than the token budget of " +
                                  std::to_string(options.token_budget) + " (no token is over " +
                                  std::to_string(longest) + " bytes)");
  }
  const engine::tokenizer::PromptText text_part = WithoutMarkers(in.prompt);
  VLMD_ASSIGN_OR_RETURN(std::vector<int32_t> text_ids,
                        e.tokenizer().TokenizePrompt(text_part, /*add_special=*/true));
  job.text_tokens = static_cast<int64_t>(text_ids.size());
  if (job.text_tokens > options.token_budget) {
    return ResourceExhaustedError("the text alone is " + std::to_string(job.text_tokens) +
                                  " tokens, over the token budget of " +
                                  std::to_string(options.token_budget));
  }
  // Decode every image, then choose each one's tiling from its size alone, then preprocess once.
  std::vector<engine::image::Image> decoded;
  std::vector<double> ms(request.images.size(), 0.0);
  // A JPEG decodes at the smallest DCT scale that the model plans as the full image: a 4000x3000
  // photo for a 1288x966 Qwen image decodes at 1/2.
  engine::image::DecodeLimits limits = options.decode_limits;
  limits.accept_reduced = [&e](engine::image::ImageSize full, engine::image::ImageSize reduced) {
    return ReducedSizePlansAsFull(e, full, reduced);
  };
  // Redaction looks at full size: a face the detectors cannot find at 1/8 scale would still
  // reach the encoder.
  if (!redactors.empty()) limits.accept_reduced = nullptr;
  // A first image decoded in full before (routing) is the image this loop would decode when it
  // decodes at full size too: without a DCT scale (not a JPEG) or without a needed size.
  if (first && !request.images.empty() && limits.accept_reduced &&
      engine::image::SniffFormat(std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(request.images[0].data()), request.images[0].size())) ==
          engine::image::ImageFormat::kJpeg) {
    first.reset();  // this model's decode is smaller: its own, as without routing
  }
  for (size_t i = 0; i < request.images.size(); ++i) {
    DecodedImage d;
    if (i == 0 && first) {
      d = std::move(*first);
    } else {
      VLMD_ASSIGN_OR_RETURN(d, DecodeTimed(request.images[i], limits));
    }
    ms[i] = d.decode_ms;
    limits.budget_held += d.image.budget_bytes;  // the next image cannot wait for this one
    decoded.push_back(std::move(d.image));
  }
  // Redaction before anything keeps pixels: the cache key, the stream's thumbnail and the
  // encoder all see the covered image.
  if (!redactors.empty()) {
    job.redaction.emplace();
    job.redact_start = Clock::now();
    for (engine::image::Image& img : decoded) {
      // In order (the model's setting, then a route's): each sees what the one before covered,
      // which its detectors do not find again. Fails closed (UNAVAILABLE, 503): an image no
      // detector looked at does not go on.
      for (const redact::Redactor* redactor : redactors) {
        VLMD_ASSIGN_OR_RETURN(const redact::Redaction r, redactor->Apply(&img));
        job.redaction->faces += r.faces;
        job.redaction->plates += r.plates;
        job.redaction->detect_ms += r.detect_ms;
      }
    }
    job.redact_end = Clock::now();
  }
  // The rows an image adds to the prompt at a level: its visual rows and the family's wrapper
  // tokens (the one count of the prompt builder), less what any prompt has (a BOS): counted once,
  // in the text's count, not again for each frame.
  int64_t prompt_specials = -1;
  auto frame_rows = [&](const engine::image::Image& img, int32_t level) -> Result<int64_t> {
    if (prompt_specials < 0) {
      VLMD_ASSIGN_OR_RETURN(prompt_specials, e.CountPromptRows(std::string_view(), {}, {}));
    }
    const engine::models::ImagePlan plan = e.PlanImage(img.width, img.height, level);
    VLMD_ASSIGN_OR_RETURN(const int64_t rows, e.CountPromptRows(api::kMediaMarker, {},
                                                                std::span<const engine::models::ImagePlan>(&plan, 1)));
    return rows - prompt_specials;
  };
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
    part.dropped_for_allowlist = view.withdrawn;
    // The reason needs the view whole: computed below from part and the view's counts.
    const int held_frames = view.held_frames;
    const bool expired = view.expired;
    in.context = std::move(view.context);
    for (const ContextFrame& f : in.context) context_tokens += f.prompt_tokens;
    int64_t own = job.text_tokens;
    for (const auto& img : decoded) {
      VLMD_ASSIGN_OR_RETURN(int64_t rows, frame_rows(img, 0));
      own += rows;
    }
    const int64_t limit =
        std::min<int64_t>(options.token_budget, int64_t{e.options().n_ctx} - ReplyReserve(request));
    while (!in.context.empty() && own + context_tokens > limit) {
      context_tokens -= in.context.front().prompt_tokens;
      in.context.erase(in.context.begin());
      ++part.dropped_for_budget;
    }
    part.context_frames = static_cast<int>(in.context.size());
    if (part.context_frames == 0) {
      part.no_context_reason = NoContextReason(part, held_frames, expired, request.stream_frame);
    }
    job.stream = part;
    // One marker per earlier frame, before the first one (no markers: the engine puts every
    // image before the text, in order).
    if (const size_t at = in.prompt.text().find(api::kMediaMarker); at != std::string::npos) {
      std::string markers;
      for (size_t i = 0; i < in.context.size(); ++i) markers += api::kMediaMarker;
      in.prompt.Insert(at, markers);
      if (placeholder) in.prompt.Erase(at + markers.size(), api::kMediaMarker.size());
    }
  }
  // Token budget, counted on the whole prompt as the engine will build it (text, wrapper tokens,
  // the stream's frames, the images at their levels): while over, the image with the most rows
  // shrinks by one of its family's steps (models::ImagePlan); fixed-size families cannot.
  std::vector<engine::runtime::EncodedImage> context_layouts;
  for (const ContextFrame& f : in.context) {
    engine::runtime::EncodedImage l;
    l.layout = f.encoded->layout;
    l.tokens_per_tile = f.encoded->tokens_per_tile;
    context_layouts.push_back(std::move(l));
  }
  std::vector<int32_t> level(decoded.size(), 0), max_level(decoded.size(), 0);
  std::vector<std::vector<engine::models::ImagePlan>> levels_of(decoded.size());
  for (size_t i = 0; i < decoded.size(); ++i) {
    levels_of[i] = e.PlanLevels(decoded[i].width, decoded[i].height);
    max_level[i] = static_cast<int32_t>(levels_of[i].size()) - 1;
  }
  std::vector<engine::models::ImagePlan> plans(decoded.size());
  auto plan_all = [&] {
    for (size_t i = 0; i < decoded.size(); ++i) plans[i] = levels_of[i][level[i]];
  };
  plan_all();
  VLMD_ASSIGN_OR_RETURN(int64_t total, e.CountPromptRows(in.prompt, context_layouts, plans));
  // The prompt must also leave max_tokens of the context (the engine refuses it otherwise, and
  // that was found only after every image was encoded): images shrink for that limit too.
  const int64_t context_left = int64_t{e.options().n_ctx} - ReplyReserve(request);
  const int64_t limit = std::min<int64_t>(options.token_budget, context_left);
  int first_shrunk = -1;  // the reply's top-level budget entry: the first image made smaller
  while (total > limit) {
    int best = -1;
    for (size_t i = 0; i < decoded.size(); ++i) {
      if (level[i] < max_level[i] &&
          (best < 0 || plans[i].rows > plans[static_cast<size_t>(best)].rows)) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0 && total > options.token_budget) {
      return ResourceExhaustedError("the prompt needs " + std::to_string(total) +
                                    " tokens, over the token budget of " +
                                    std::to_string(options.token_budget) +
                                    ", and the images cannot be reduced further");
    }
    if (best < 0) {
      const std::string reply = request.sampling.has_max_tokens
                                    ? "with max_tokens " + std::to_string(request.sampling.max_tokens)
                                    : "with a reply of at least one token";
      return ResourceExhaustedError(
          "the prompt needs " + std::to_string(total) + " tokens; " + reply + std::string(kContextOverflowText) +
          std::to_string(e.options().n_ctx) + " leaves room for " +
          std::to_string(std::max<int64_t>(context_left, 0)) +
          (decoded.empty() ? std::string() : ", and the images cannot be reduced further"));
    }
    if (first_shrunk < 0) first_shrunk = best;
    ++level[static_cast<size_t>(best)];
    plan_all();
    VLMD_ASSIGN_OR_RETURN(total, e.CountPromptRows(in.prompt, context_layouts, plans));
  }
  for (size_t i = 0; i < decoded.size(); ++i) {
    rt::ImageTimings t;
    VLMD_ASSIGN_OR_RETURN(rt::PreparedImage img, e.PreprocessDecoded(decoded[i], level[i], &t));
    ms[i] += t.preprocess_ms;
    job.image_decode_ms += ms[i];
    in.image_prepare_ms.push_back(ms[i]);
    if (level[i] > 0) {  // the size the model would have used, and the one the budget chose
      const engine::models::ImagePlan& own = levels_of[i][0];
      if (static_cast<int>(i) == first_shrunk) job.budget_first = job.budget.size();
      job.budget.push_back(BudgetAction{static_cast<int>(i), {own.width, own.height},
                                        {plans[i].width, plans[i].height}});
    }
    in.images.push_back(std::move(img));
  }
  job.image_tokens = total - job.text_tokens;  // the context frames' and wrapper tokens included
  if (job.stream && !decoded.empty()) {
    VLMD_ASSIGN_OR_RETURN(job.stream->frame_tokens, frame_rows(decoded.front(), level.front()));
  }
  const api::SamplingRequest& s = request.sampling;
  rt::GenerateParams& p = in.params;
  // Without max_tokens the reply gets the default or what the context has left, if less
  // (finish_reason "length" at the context's end, as OpenAI and llama.cpp answer).
  p.max_tokens = s.has_max_tokens
                     ? s.max_tokens
                     : static_cast<int32_t>(std::clamp<int64_t>(
                           int64_t{e.options().n_ctx} - total, 1, s.max_tokens));
  p.stop = s.stop;
  p.token_stats = true;  // logprobs and trust signals
  p.top_logprobs = request.sampling.top_logprobs;
  p.sampling.temperature = s.temperature;
  p.sampling.top_p = s.top_p;
  p.sampling.top_k = s.top_k;
  p.sampling.min_p = s.min_p;
  p.sampling.repeat_penalty = s.repeat_penalty;
  p.sampling.repeat_last_n = s.repeat_last_n;
  // Without a seed each request samples differently (seed 0 for all made every "random" reply
  // the same); with one, the same request gives the same reply.
  p.sampling.seed = s.has_seed ? s.seed : std::random_device{}();
  in.deadline = Clock::now() + options.timeout;
  return job;
}

}  // namespace vlmd::serve
