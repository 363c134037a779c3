// TextEngine: prompt prefill in batches, then one decode step per token (see text_engine.h).
#include "engine/runtime/text_engine.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/gguf/gguf_reader.h"
#include "engine/image/image.h"
#include "engine/kernels/kernel_table.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/utf8_stream.h"

namespace vlmd::engine::runtime {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: those
// bytes are held back from the stream until it is known whether a stop string completes.
size_t PartialStopSuffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    for (size_t len = std::min(s.size() - 1, text.size()); len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace

Result<std::unique_ptr<TextEngine>> TextEngine::Load(const std::string& model_path,
                                                     const EngineOptions& opts) {
  if (opts.n_ctx < 1 || opts.n_batch < 1) return InvalidArgumentError("n_ctx and n_batch must be >= 1");
  std::unique_ptr<TextEngine> e(new TextEngine());
  e->opts_ = opts;
  VLMD_ASSIGN_OR_RETURN(kernels::Isa isa, kernels::SelectIsa());
  e->ctx_.kernels = &kernels::GetKernelTable(isa);
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(model_path));
  std::shared_ptr<const gguf::GgufFile> shared(std::move(file));
  VLMD_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromGguf(*shared));
  e->tokenizer_ = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
  VLMD_ASSIGN_OR_RETURN(e->model_, models::LlamaModel::Load(shared));
  if (shared->Find("tokenizer.chat_template") != nullptr) {
    auto src = shared->GetString("tokenizer.chat_template");
    if (src.ok()) e->chat_template_source_ = std::string(*src);
  }
  if (!opts.mmproj_path.empty()) {
    VLMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> mm, gguf::GgufFile::Open(opts.mmproj_path));
    VLMD_ASSIGN_OR_RETURN(e->vision_,
                          models::VisionEncoder::Load(std::shared_ptr<const gguf::GgufFile>(std::move(mm))));
    if (e->vision_->n_embd() != e->model_->config().d_model) {
      return InvalidArgumentError("the mmproj projects to width " + std::to_string(e->vision_->n_embd()) +
                                  " but the text model's embedding width is " +
                                  std::to_string(e->model_->config().d_model));
    }
  }
  if (e->tokenizer_->n_tokens() > e->model_->config().n_vocab) {
    return InvalidArgumentError("the vocabulary has more tokens than token_embd.weight has rows");
  }
  int threads = opts.threads > 0 ? opts.threads : static_cast<int>(std::thread::hardware_concurrency());
  e->pool_ = std::make_unique<ThreadPool>(threads < 1 ? 1 : threads);
  e->ctx_.pool = e->pool_.get();
  e->vision_ctx_.kernels = e->ctx_.kernels;
  e->vision_ctx_.pool = e->pool_.get();
  return e;
}

std::string_view TextEngine::isa_name() const { return kernels::IsaName(ctx_.kernels->isa); }

Status TextEngine::Prefill(const PromptRows& prompt, models::KvCache* cache, float* logits) {
  const int64_t n = static_cast<int64_t>(prompt.tokens.size());
  const int64_t d = model_->config().d_model;
  std::vector<int32_t> pos, seq;
  std::vector<float> embd;  // [len, d_model] rows of this chunk's image tokens (others unused)
  int64_t next_embd = 0;    // next row of prompt.embeddings
  models::KvCache* caches[] = {cache};
  for (int64_t start = 0; start < n; start += opts_.n_batch) {
    const int64_t len = std::min<int64_t>(opts_.n_batch, n - start);
    pos.resize(len);
    seq.assign(len, 0);
    bool any_image = false;
    for (int64_t i = 0; i < len; ++i) {
      pos[i] = static_cast<int32_t>(start + i);
      any_image = any_image || prompt.tokens[start + i] < 0;
    }
    if (any_image) {
      embd.assign(static_cast<size_t>(len * d), 0.0f);
      for (int64_t i = 0; i < len; ++i) {
        if (prompt.tokens[start + i] >= 0) continue;
        if ((next_embd + 1) * d > static_cast<int64_t>(prompt.embeddings.size())) {
          return InvalidArgumentError("prompt has more image rows than embeddings");
        }
        std::copy_n(prompt.embeddings.data() + next_embd * d, d, embd.data() + i * d);
        ++next_embd;
      }
    }
    const bool last = start + len == n;
    const int32_t logit_row = static_cast<int32_t>(len - 1);
    models::ForwardBatch b{len, prompt.tokens.data() + start, any_image ? embd.data() : nullptr,
                           pos.data(), seq.data(), last ? &logit_row : nullptr, last ? 1 : 0};
    VLMD_RETURN_IF_ERROR(model_->Forward(b, caches, &ctx_, logits));
  }
  return Status::Ok();
}

Result<EncodedImage> TextEngine::EncodeImage(std::span<const uint8_t> bytes, ImageTimings* timings) {
  if (!vision_) return FailedPreconditionError("this engine has no vision encoder (no --mmproj)");
  ImageTimings t;
  auto t0 = std::chrono::steady_clock::now();
  VLMD_ASSIGN_OR_RETURN(image::Image img, image::DecodeImage(bytes));
  t.decode_ms = MsSince(t0);
  t0 = std::chrono::steady_clock::now();
  VLMD_ASSIGN_OR_RETURN(models::PreprocessedImage pre,
                        models::PreprocessImage(vision_->config(),
                                                models::RgbView{img.width, img.height, img.rgb}));
  t.preprocess_ms = MsSince(t0);
  t0 = std::chrono::steady_clock::now();
  EncodedImage out;
  VLMD_ASSIGN_OR_RETURN(out.embeddings, vision_->Encode(pre.pixels.data(), pre.n_tiles, &vision_ctx_));
  t.encode_ms = MsSince(t0);
  out.tokens_per_tile = vision_->tokens_per_tile();
  pre.pixels.clear();
  pre.pixels.shrink_to_fit();
  out.layout = std::move(pre);
  if (timings != nullptr) *timings = t;
  return out;
}

bool TextEngine::chat_template_is_fallback() const {
  return tokenizer::ChatTemplate::Detect(chat_template_source_).is_fallback();
}

Result<PromptRows> TextEngine::BuildPrompt(std::string_view text,
                                           std::span<const EncodedImage> images, bool raw) const {
  std::string prompt(text);
  if (!raw) {
    const auto tmpl = tokenizer::ChatTemplate::Detect(chat_template_source_);
    const tokenizer::ChatMessage msg{"user", std::string(text)};
    prompt = tmpl.Apply(std::span<const tokenizer::ChatMessage>(&msg, 1), true);
  }
  if (images.empty()) {
    PromptRows rows;
    VLMD_ASSIGN_OR_RETURN(rows.tokens, tokenizer_->Tokenize(prompt, true, true));
    return rows;
  }
  if (!vision_) return FailedPreconditionError("images given but no vision encoder (no --mmproj)");
  return BuildMultimodalPrompt(*tokenizer_, vision_->config(), prompt, images, vision_->n_embd());
}

Result<std::vector<float>> TextEngine::PromptLogits(std::span<const int32_t> prompt) {
  PromptRows rows;
  rows.tokens.assign(prompt.begin(), prompt.end());
  return PromptLogits(rows);
}

Result<std::vector<float>> TextEngine::PromptLogits(const PromptRows& rows) {
  const std::span<const int32_t> prompt(rows.tokens);
  if (prompt.empty()) return InvalidArgumentError("empty prompt");
  if (static_cast<int64_t>(prompt.size()) > opts_.n_ctx) {
    return ResourceExhaustedError("prompt of " + std::to_string(prompt.size()) +
                                  " tokens exceeds the context of " + std::to_string(opts_.n_ctx));
  }
  auto cache = model_->NewCache(opts_.n_ctx);
  std::vector<float> logits(model_->config().n_vocab);
  VLMD_RETURN_IF_ERROR(Prefill(rows, cache.get(), logits.data()));
  return logits;
}

Result<GenerateResult> TextEngine::Generate(std::span<const int32_t> prompt,
                                            const GenerateParams& params,
                                            const TextCallback& on_text) {
  PromptRows rows;
  rows.tokens.assign(prompt.begin(), prompt.end());
  return Generate(rows, params, on_text);
}

Result<GenerateResult> TextEngine::Generate(const PromptRows& rows, const GenerateParams& params,
                                            const TextCallback& on_text) {
  const std::span<const int32_t> prompt(rows.tokens);
  if (prompt.empty()) return InvalidArgumentError("empty prompt");
  VLMD_RETURN_IF_ERROR(ValidateSamplingParams(params.sampling));
  if (params.max_tokens < 0) return InvalidArgumentError("max_tokens must be >= 0");
  const int64_t needed = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (needed > opts_.n_ctx) {
    return ResourceExhaustedError("prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                                  std::to_string(params.max_tokens) + ") exceeds the context of " +
                                  std::to_string(opts_.n_ctx));
  }
  GenerateResult r;
  r.prompt_tokens = static_cast<int32_t>(prompt.size());
  auto cache = model_->NewCache(static_cast<int32_t>(needed));
  std::vector<float> logits(model_->config().n_vocab);
  auto t0 = std::chrono::steady_clock::now();
  VLMD_RETURN_IF_ERROR(Prefill(rows, cache.get(), logits.data()));
  r.prefill_ms = MsSince(t0);

  Sampler sampler(params.sampling);
  std::vector<int32_t> history;  // text ids only: image rows do not count for the penalty
  for (int32_t t : prompt) {
    if (t >= 0) history.push_back(t);
  }
  tokenizer::Utf8StreamDecoder utf8;
  std::string pending;  // decoded text not yet passed to on_text (may hold a partial stop)
  r.finish_reason = "length";
  t0 = std::chrono::steady_clock::now();
  models::KvCache* caches[] = {cache.get()};
  for (int32_t step = 0; step < params.max_tokens; ++step) {
    TokenStats stats;
    const int32_t tok = sampler.Sample(logits, history, params.token_stats ? &stats : nullptr);
    r.tokens.push_back(tok);
    if (params.token_stats) r.token_stats.push_back(stats);
    history.push_back(tok);
    if (!params.ignore_eos && tokenizer_->IsEog(tok)) {
      r.finish_reason = "stop";
      break;
    }
    pending += utf8.Push(tokenizer_->TokenToPiece(tok, /*special=*/false));
    bool stopped = false;
    for (const std::string& s : params.stop) {
      const size_t at = pending.find(s);
      if (!s.empty() && at != std::string::npos) {
        pending.resize(at);
        stopped = true;
      }
    }
    const size_t hold = stopped ? 0 : PartialStopSuffix(pending, params.stop);
    if (pending.size() > hold) {
      const std::string_view out(pending.data(), pending.size() - hold);
      r.text += out;
      const bool go_on = !on_text || on_text(out);
      pending.erase(0, pending.size() - hold);
      if (!go_on) {
        r.finish_reason = "cancelled";
        break;
      }
    }
    if (stopped) {
      r.finish_reason = "stop";
      break;
    }
    if (step + 1 == params.max_tokens) break;
    const int32_t pos = cache->n_filled(), seq = 0, row = 0;
    models::ForwardBatch b{1, &tok, nullptr, &pos, &seq, &row, 1};
    VLMD_RETURN_IF_ERROR(model_->Forward(b, caches, &ctx_, logits.data()));
  }
  if (r.finish_reason == "length") {
    const std::string tail = pending + utf8.Flush();  // held-back bytes that never became a stop
    r.text += tail;
    if (on_text && !tail.empty()) on_text(tail);
  }
  r.decode_ms = MsSince(t0);
  return r;
}

}  // namespace vlmd::engine::runtime
