// VlmEngine: prompt prefill in batches, then one decode step per token (see vlm_engine.h).
#include "engine/runtime/vlm_engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "core/large_alloc.h"
#include "core/sealed_file.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/model_file.h"
#include "engine/image/image.h"
#include "engine/kernels/kernel_table.h"
#include "engine/ops/numerics.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8_stream.h"

namespace vlmd::engine::runtime {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<std::unique_ptr<VlmEngine>> VlmEngine::Load(const std::string& model_path,
                                                     const EngineOptions& opts) {
  if (opts.n_ctx < 1 || opts.n_batch < 1) return InvalidArgumentError("n_ctx and n_batch must be >= 1");
  std::unique_ptr<VlmEngine> e(new VlmEngine());
  e->opts_ = opts;
  VLMD_ASSIGN_OR_RETURN(kernels::Isa isa, kernels::SelectIsa());
  e->ctx_.kernels = &kernels::GetKernelTable(isa);
  int threads = opts.threads > 0 ? opts.threads : static_cast<int>(std::thread::hardware_concurrency());
  e->pool_ = std::make_unique<ThreadPool>(threads < 1 ? 1 : threads);
  e->ctx_.pool = e->pool_.get();
  e->vision_ctx_.kernels = e->ctx_.kernels;
  e->vision_ctx_.pool = e->pool_.get();
  ops::PackedBytesCap cap(opts.max_packed_bytes, opts.max_packed_bytes_hint);
  if (opts.max_packed_bytes != UINT64_MAX) {
    // Sealed files decrypt into the process's memory: their headers' plaintext sizes against the
    // cap before any is decrypted (a file that is not sealed, or not readable, fails below).
    uint64_t plaintext = 0;
    for (const std::string* path : {&model_path, &opts.mmproj_path}) {
      if (path->empty() || !IsSealedFile(*path)) continue;
      if (auto header = ReadSealedHeader(*path); header.ok()) plaintext += header->plaintext_bytes;
    }
    cap.CountHeld([plaintext] { return plaintext; });
    VLMD_RETURN_IF_ERROR(cap.CheckHeld());
  }
  // Both files are opened (a sealed one decrypted) and hashed before any loader releases pages.
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                        gguf::OpenModelFile(model_path, opts.model_key, e->pool_.get()));
  std::shared_ptr<const gguf::GgufFile> shared(std::move(file));
  std::shared_ptr<const gguf::GgufFile> mmproj;
  if (!opts.mmproj_path.empty()) {
    VLMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> mm,
                          gguf::OpenModelFile(opts.mmproj_path, opts.model_key, e->pool_.get()));
    mmproj = std::move(mm);
  }
  std::vector<gguf::OpenedFile> opened{{model_path, shared.get()}};
  if (mmproj) opened.push_back({opts.mmproj_path, mmproj.get()});
  for (const gguf::OpenedFile& f : opened) {
    if (!f.file->decrypted()) continue;
    e->decrypted_ = true;
    e->decrypted_locked_ = e->decrypted_locked_ && f.file->locked_in_memory();
  }
  if (!e->decrypted_) e->decrypted_locked_ = false;
  // The copies the loaders make of a sealed model's weights (packed matrices, f32 norms and
  // biases: all in large_alloc) get the same care as the decrypted file: out of core dumps,
  // locked, wiped when freed (for the rest of the process).
  if (e->decrypted_) ProtectLargeAllocations();
  if (opts.hash_files) {
    VLMD_ASSIGN_OR_RETURN(e->files_sha256_, gguf::HashModelFiles(opened));
  }
  VLMD_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromGguf(*shared));
  e->tokenizer_ = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
  // The loaders pack the matrices on the engine's threads.
  // A sealed model's decrypted files are the process's memory until the loaders give their
  // packed rows back: counted beside the packed copies.
  cap.CountHeld([&opened] {
    uint64_t held = 0;
    for (const gguf::OpenedFile& f : opened) {
      if (f.file->decrypted()) held += f.file->file_size() - std::min(f.file->released_bytes(), f.file->file_size());
    }
    return held;
  });
  const ops::WeightPacking packing{.kt = e->ctx_.kernels, .precision = opts.precision,
                                   .pool = e->pool_.get(), .cap = &cap};
  VLMD_ASSIGN_OR_RETURN(e->model_, models::TextDecoder::Load(shared, packing, opts.n_ctx));
  if (shared->Find("tokenizer.chat_template") != nullptr) {
    auto src = shared->GetString("tokenizer.chat_template");
    if (src.ok()) e->chat_template_source_ = std::string(*src);
  }
  if (mmproj) {
    VLMD_ASSIGN_OR_RETURN(e->vision_, models::VisionEncoder::Load(mmproj, packing));
    if (e->vision_->n_embd() != e->model_->config().n_embd_inp()) {
      return InvalidArgumentError("the mmproj projects to width " + std::to_string(e->vision_->n_embd()) +
                                  " but the text model's input width is " +
                                  std::to_string(e->model_->config().n_embd_inp()));
    }
    if (models::IsQwenVl(e->vision_->config().projector) != e->model_->config().multi_rope()) {
      return InvalidArgumentError("the mmproj (" + e->vision_->config().projector_name +
                                  ") and the text model (" + e->model_->config().arch +
                                  ") do not belong together: M-RoPE positions on one side only");
    }
  }
  if (e->tokenizer_->n_tokens() > e->model_->config().n_vocab) {
    return InvalidArgumentError("the vocabulary has more tokens than token_embd.weight has rows");
  }
  if (e->decrypted_) e->decrypted_locked_ = e->decrypted_locked_ && LargeAllocAllLocked();
  return e;
}

std::string_view VlmEngine::isa_name() const { return kernels::IsaName(ctx_.kernels->isa); }

Status VlmEngine::Prefill(const PromptRows& prompt, models::KvCache* cache, float* logits,
                           int64_t first_row, int64_t end_row, const RowLogitsRequest* rows_out) {
  const int64_t n = static_cast<int64_t>(prompt.tokens.size());
  const int64_t end = end_row < 0 ? n : std::min(end_row, n);
  const int64_t d = model_->config().n_embd_inp();  // an image row's width (deepstack included)
  if (!prompt.rope_pos.empty() && static_cast<int64_t>(prompt.rope_pos.size()) != 4 * n) {
    return InvalidArgumentError("prompt has " + std::to_string(prompt.rope_pos.size()) +
                                " RoPE positions for " + std::to_string(n) + " rows (4 each)");
  }
  std::vector<int32_t> pos, seq;
  std::vector<float> embd;  // [len, d_model] rows of this chunk's image tokens (others unused)
  int64_t next_embd = 0;    // next row of prompt.embeddings
  for (int64_t i = 0; i < first_row; ++i) next_embd += prompt.tokens[i] < 0 ? 1 : 0;
  models::KvCache* caches[] = {cache};
  std::vector<ops::RowSpan> spans;  // this chunk's bidirectional spans, chunk-relative
  std::vector<int32_t> out_rows;    // rows_out: the chunk's wanted rows
  std::vector<float> row_logits;    // rows_out: [out_rows, n_vocab]
  for (int64_t start = first_row, len = 0; start < end; start += len) {
    len = SpanSafeEnd(prompt, start, std::min<int64_t>(start + opts_.n_batch, end)) - start;
    spans.clear();
    for (const ops::RowSpan& s : prompt.bidirectional) {
      if (s.start >= start && s.start + s.len <= start + len) spans.push_back({s.start - start, s.len});
    }
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
    models::ForwardBatch b{.n_tokens = len,
                           .tokens = prompt.tokens.data() + start,
                           .embeddings = any_image ? embd.data() : nullptr,
                           .slot = pos.data(),
                           .seq = seq.data(),
                           .logit_rows = last ? &logit_row : nullptr,
                           .n_logit_rows = last ? 1 : 0};
    if (rows_out) {  // the wanted rows' logits
      out_rows.clear();
      for (int64_t i = 0; i < len; ++i) {
        if (!rows_out->wanted || (*rows_out->wanted)(start + i)) out_rows.push_back(static_cast<int32_t>(i));
      }
      row_logits.resize(out_rows.size() * static_cast<size_t>(model_->config().n_vocab));
      b.logit_rows = out_rows.data();
      b.n_logit_rows = static_cast<int64_t>(out_rows.size());
    }
    b.prompt = true;
    b.bidirectional = spans;
    if (!prompt.rope_pos.empty()) {
      b.rope_pos = prompt.rope_pos.data() + 4 * start;
      b.rope_pos_per_row = 4;
    }
    VLMD_RETURN_IF_ERROR(model_->Forward(b, caches, &ctx_, rows_out ? row_logits.data() : logits));
    if (rows_out) {
      const size_t v = static_cast<size_t>(model_->config().n_vocab);
      for (size_t i = 0; i < out_rows.size(); ++i) {
        VLMD_RETURN_IF_ERROR((*rows_out->on_row)(
            start + out_rows[i], std::span<const float>(row_logits).subspan(i * v, v)));
      }
    }
  }
  if (end == n && ctx_.attention_kv.capacity() * sizeof(float) > opts_.max_idle_scratch_bytes) {
    std::vector<float>().swap(ctx_.attention_kv);  // a decode step needs a few KB of it
  }
  return Status::Ok();
}

int32_t VlmEngine::MaxBatchRows(const PromptRows& rows) const {
  int64_t most = opts_.n_batch;  // Prefill's chunks; decode steps add one row
  for (const ops::RowSpan& s : rows.bidirectional) most = std::max(most, s.len);  // a whole image
  return static_cast<int32_t>(most);
}

int32_t VlmEngine::MaxShrinkLevel(int32_t width, int32_t height) const {
  return vision_ ? vision_->MaxShrinkLevel(width, height) : 0;
}

std::vector<models::ImagePlan> VlmEngine::PlanLevels(int32_t width, int32_t height) const {
  if (!vision_) return {};
  return vision_->PlanLevels(width, height);
}

models::ImagePlan VlmEngine::PlanImage(int32_t width, int32_t height, int32_t level) const {
  if (!vision_ || width < 1 || height < 1) return {};
  return vision_->PlanImage(width, height, level);
}

Result<PreparedImage> VlmEngine::PrepareImage(std::span<const uint8_t> bytes,
                                               const image::DecodeLimits& limits,
                                               int32_t level, ImageTimings* timings) const {
  if (!vision_) return FailedPreconditionError("this engine has no vision encoder (no --mmproj)");
  const auto t0 = std::chrono::steady_clock::now();
  VLMD_ASSIGN_OR_RETURN(image::Image img, image::DecodeImage(bytes, limits));
  if (timings != nullptr) timings->decode_ms = MsSince(t0);
  return PreprocessDecoded(img, level, timings);
}

Result<PreparedImage> VlmEngine::PreprocessDecoded(const image::Image& img, int32_t level,
                                                    ImageTimings* timings) const {
  if (!vision_) return FailedPreconditionError("this engine has no vision encoder (no --mmproj)");
  const auto t0 = std::chrono::steady_clock::now();
  const models::ImagePlan plan = vision_->PlanImage(img.width, img.height, level);
  const models::VisionConfig& c = vision_->config();
  PreparedImage out;
  out.source_width = img.width;
  out.source_height = img.height;
  // The cache key: the pixels, the family, the size its preprocessing resized them to and the
  // tiling cut from it (every parameter that changes the encoder's input). The size alone is not
  // enough: InternVL's 1x1 grid plus its thumbnail and the thumbnail alone (a shrunk image) are
  // both one tile's size, and had one cache entry.
  const models::PreprocessedImage& t = plan.layout;
  out.key = image::ImageKey(img) + ":" + c.projector_name + ":" + std::to_string(c.image_size) +
            ":" + std::to_string(plan.width) + "x" + std::to_string(plan.height) + ":" +
            std::to_string(t.grid_cols) + "x" + std::to_string(t.grid_rows) + "+" +
            (t.has_global ? "g" : "") + std::to_string(plan.work_units) + "u" +
            std::to_string(plan.rows) + "r";
  VLMD_ASSIGN_OR_RETURN(out.tiles,
                        vision_->Preprocess(models::RgbView{img.width, img.height, img.rgb}, plan));
  if (timings != nullptr) timings->preprocess_ms = MsSince(t0);
  return out;
}

Result<int64_t> VlmEngine::CountPromptRows(const tokenizer::PromptText& prompt,
                                            std::span<const EncodedImage> encoded,
                                            std::span<const models::ImagePlan> planned) const {
  if (encoded.empty() && planned.empty()) {
    VLMD_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          tokenizer_->TokenizePrompt(prompt, /*add_special=*/true));
    return static_cast<int64_t>(ids.size());
  }
  if (!vision_) return FailedPreconditionError("images given but no vision encoder (no --mmproj)");
  std::vector<EncodedImage> layouts;
  for (const EncodedImage& e : encoded) {
    EncodedImage l;
    l.layout = e.layout;
    l.layout.pixels.clear();
    l.tokens_per_tile = e.tokens_per_tile;
    layouts.push_back(std::move(l));
  }
  for (const models::ImagePlan& p : planned) {
    EncodedImage l;
    l.layout = p.layout;
    l.tokens_per_tile = vision_->tokens_per_tile();
    layouts.push_back(std::move(l));
  }
  return CountMultimodalPromptRows(*tokenizer_, vision_->config(), prompt, layouts, vision_->n_embd());
}

Result<EncodedImage> VlmEngine::EncodePrepared(const PreparedImage& image, ImageTimings* timings) {
  if (!vision_) return FailedPreconditionError("this engine has no vision encoder (no --mmproj)");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> embeddings(
      static_cast<size_t>(vision_->ImageTokens(image.tiles) * vision_->n_embd()));
  VLMD_RETURN_IF_ERROR(vision_->EncodeImage(image.tiles, &vision_ctx_, embeddings.data()));
  if (timings != nullptr) timings->encode_ms = MsSince(t0);
  return EncodedFromTiles(image, std::move(embeddings));
}

Result<std::unique_ptr<models::ImageEncoding>> VlmEngine::BeginEncode(
    const PreparedImage& image) const {
  if (!vision_) return FailedPreconditionError("this engine has no vision encoder (no --mmproj)");
  return vision_->BeginEncode(image.tiles);
}

Status VlmEngine::EncodeUnits(models::ImageEncoding* encoding, int64_t max_units) {
  if (!vision_) return FailedPreconditionError("this engine has no vision encoder (no --mmproj)");
  return vision_->EncodeUnits(encoding, max_units, &vision_ctx_);
}

EncodedImage VlmEngine::EncodedFrom(const PreparedImage& image,
                                     models::ImageEncoding* encoding) const {
  return EncodedFromTiles(image, encoding->TakeEmbeddings());
}

EncodedImage VlmEngine::EncodedFromTiles(const PreparedImage& image,
                                          std::vector<float> embeddings) const {
  EncodedImage out;
  out.embeddings = std::move(embeddings);
  out.tokens_per_tile = vision_ ? vision_->tokens_per_tile() : 0;
  // Every layout field but the pixels (not needed once encoded; copying them would cost MBs).
  out.layout.tile_size = image.tiles.tile_size;
  out.layout.width = image.tiles.width;
  out.layout.height = image.tiles.height;
  out.layout.grid_cols = image.tiles.grid_cols;
  out.layout.grid_rows = image.tiles.grid_rows;
  out.layout.has_global = image.tiles.has_global;
  out.layout.n_tiles = image.tiles.n_tiles;
  return out;
}

Result<EncodedImage> VlmEngine::EncodeImage(std::span<const uint8_t> bytes, ImageTimings* timings) {
  ImageTimings t;
  VLMD_ASSIGN_OR_RETURN(PreparedImage prepared, PrepareImage(bytes, image::DecodeLimits{}, 0, &t));
  VLMD_ASSIGN_OR_RETURN(EncodedImage out, EncodePrepared(prepared, &t));
  if (timings != nullptr) *timings = t;
  return out;
}

tokenizer::PromptText VlmEngine::ApplyChatTemplate(
    std::span<const tokenizer::ChatMessage> messages) const {
  return tokenizer::ChatTemplate::Detect(chat_template_source_).ApplyMarked(messages, true);
}

bool VlmEngine::chat_template_is_fallback() const {
  return tokenizer::ChatTemplate::Detect(chat_template_source_).is_fallback();
}

Result<PromptRows> VlmEngine::BuildPrompt(const tokenizer::PromptText& text,
                                           std::span<const EncodedImage> images, bool raw) const {
  tokenizer::PromptText templated;
  if (!raw) {
    const auto tmpl = tokenizer::ChatTemplate::Detect(chat_template_source_);
    tokenizer::ChatMessage msg{"user", text.text()};
    // Without markers the images open the user turn, as llama.cpp's mtmd puts them (they went
    // before the whole template, outside the turn).
    if (!images.empty() && msg.content.find(kDefaultMediaMarker) == std::string::npos) {
      std::string markers;
      for (size_t i = 0; i < images.size(); ++i) markers += kDefaultMediaMarker;
      msg.content.insert(0, markers);
    }
    templated = tmpl.ApplyMarked(std::span<const tokenizer::ChatMessage>(&msg, 1), true);
  }
  const tokenizer::PromptText& prompt = raw ? text : templated;
  if (images.empty()) {
    PromptRows rows;
    VLMD_ASSIGN_OR_RETURN(rows.tokens,
                          tokenizer_->TokenizePrompt(prompt, /*add_special=*/true));
    return rows;
  }
  if (!vision_) return FailedPreconditionError("images given but no vision encoder (no --mmproj)");
  return BuildMultimodalPrompt(*tokenizer_, vision_->config(), prompt, images, vision_->n_embd());
}

Result<std::vector<float>> VlmEngine::PromptLogits(std::span<const int32_t> prompt) {
  PromptRows rows;
  rows.tokens.assign(prompt.begin(), prompt.end());
  return PromptLogits(rows);
}

Status VlmEngine::CheckPromptFits(const PromptRows& rows) const {
  if (rows.tokens.empty()) return InvalidArgumentError("empty prompt");
  if (static_cast<int64_t>(rows.tokens.size()) > opts_.n_ctx) {
    return ResourceExhaustedError("prompt of " + std::to_string(rows.tokens.size()) +
                                  " tokens exceeds the context of " + std::to_string(opts_.n_ctx));
  }
  return Status::Ok();
}

Result<std::vector<float>> VlmEngine::PromptLogits(const PromptRows& rows) {
  VLMD_RETURN_IF_ERROR(CheckPromptFits(rows));
  auto cache = model_->NewCache(opts_.n_ctx, MaxBatchRows(rows));
  std::vector<float> logits(model_->config().n_vocab);
  VLMD_RETURN_IF_ERROR(Prefill(rows, cache.get(), logits.data()));
  return logits;
}

Status VlmEngine::PromptRowLogits(const PromptRows& rows, const RowFilterFn& wanted,
                                  const RowLogitsFn& on_row) {
  VLMD_RETURN_IF_ERROR(CheckPromptFits(rows));
  auto cache = model_->NewCache(opts_.n_ctx, MaxBatchRows(rows));
  const RowLogitsRequest request{wanted ? &wanted : nullptr, &on_row};
  return Prefill(rows, cache.get(), nullptr, 0, -1, &request);
}

Result<GenerateResult> VlmEngine::Generate(std::span<const int32_t> prompt,
                                            const GenerateParams& params,
                                            const TextCallback& on_text) {
  PromptRows rows;
  rows.tokens.assign(prompt.begin(), prompt.end());
  return Generate(rows, params, on_text);
}

Result<std::unique_ptr<Sequence>> VlmEngine::StartSequence(const PromptRows& rows,
                                                            const GenerateParams& params,
                                                            const models::KvCache* prefix,
                                                            int32_t prefix_len) {
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq,
                        BeginSequence(rows, params, prefix, prefix_len));
  VLMD_RETURN_IF_ERROR(PrefillChunk(seq.get(), std::numeric_limits<int64_t>::max()));
  return seq;
}

Result<std::unique_ptr<Sequence>> VlmEngine::BeginSequence(PromptRows rows,
                                                            const GenerateParams& params,
                                                            const models::KvCache* prefix,
                                                            int32_t prefix_len) {
  const std::span<const int32_t> prompt(rows.tokens);
  if (prompt.empty()) return InvalidArgumentError("empty prompt");
  VLMD_RETURN_IF_ERROR(ValidateSamplingParams(params.sampling));
  if (params.max_tokens < 0) return InvalidArgumentError("max_tokens must be >= 0");
  for (const std::string& stop : params.stop) {
    // An empty one matches at once; one that is not UTF-8 could cut the text inside a character.
    if (stop.empty()) return InvalidArgumentError("empty stop string");
    if (!tokenizer::IsValidUtf8(stop)) return InvalidArgumentError("a stop string is not valid UTF-8");
  }
  const int64_t needed = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (needed > opts_.n_ctx) {
    return ResourceExhaustedError("prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                                  std::to_string(params.max_tokens) + ") exceeds the context of " +
                                  std::to_string(opts_.n_ctx));
  }
  auto cache = model_->NewCache(static_cast<int32_t>(needed), MaxBatchRows(rows));
  // An image's rows depend on its later rows (bidirectional): a prefix keeps whole images only.
  prefix_len = static_cast<int32_t>(SpanSafePrefix(rows, prefix_len));
  // A sliding-window ring of the parked sequence may have overwritten the prefix's last window.
  if (prefix != nullptr && prefix_len > 0 && !cache->CanCopyPrefix(*prefix, prefix_len)) prefix_len = 0;
  if (prefix != nullptr && prefix_len > 0) {
    if (prefix_len >= static_cast<int32_t>(prompt.size()) || prefix_len > prefix->n_filled() ||
        prefix->kv_dim() != cache->kv_dim() || prefix->n_layers() != cache->n_layers()) {
      return InvalidArgumentError("prefix of " + std::to_string(prefix_len) +
                                  " rows does not fit this prompt or cache");
    }
    cache->CopyPrefixFrom(*prefix, prefix_len);
  } else {
    prefix_len = 0;
  }
  auto seq = std::make_unique<Sequence>(*tokenizer_, params, std::move(cache), prompt);
  seq->position_shift_ = rows.position_shift;
  // max_tokens 0: finished at birth ("length"); nothing to prefill, and rows it kept would stay
  // with it unused (parked for prefix reuse, in no memory count).
  if (seq->finished()) return seq;
  seq->prefill_ = std::make_unique<PromptRows>(std::move(rows));
  seq->prefill_next_ = prefix_len;
  return seq;
}

Status VlmEngine::PrefillChunk(Sequence* seq, int64_t max_rows) {
  if (seq == nullptr || !seq->prefilling()) return Status::Ok();
  if (max_rows < 1) return InvalidArgumentError("PrefillChunk: max_rows < 1");
  const PromptRows& rows = *seq->prefill_;
  const int64_t n = static_cast<int64_t>(rows.tokens.size());
  const int64_t end =
      SpanSafeEnd(rows, seq->prefill_next_, seq->prefill_next_ + std::min(max_rows, n - seq->prefill_next_));
  const bool last = end == n;
  std::vector<float> logits(last ? model_->config().n_vocab : 0);
  VLMD_RETURN_IF_ERROR(Prefill(rows, seq->cache(), last ? logits.data() : nullptr,
                               seq->prefill_next_, end));
  seq->prefill_next_ = end;
  if (!last) return Status::Ok();
  seq->prefill_.reset();
  seq->prefill_next_ = 0;
  seq->Accept(logits);
  return Status::Ok();
}

uint64_t VlmEngine::activation_bytes() const {
  uint64_t b = ctx_.matmul_scratch.capacity() + step_logits_.capacity() * sizeof(float) +
               vision_ctx_.bytes();
  for (const std::vector<float>* v :
       {&ctx_.x, &ctx_.xn, &ctx_.q, &ctx_.k, &ctx_.v, &ctx_.qkv, &ctx_.attn, &ctx_.gate, &ctx_.up,
        &ctx_.rope_table, &ctx_.logit_in, &ctx_.attention_kv}) {
    b += v->capacity() * sizeof(float);
  }
  return b;
}

Status VlmEngine::DecodeStep(std::span<Sequence* const> seqs) {
  std::vector<Sequence*> active;
  std::vector<models::KvCache*> caches;
  for (Sequence* s : seqs) {
    if (s != nullptr && !s->finished() && !s->prefilling()) {
      active.push_back(s);
      caches.push_back(s->cache());
    }
  }
  const int64_t n = static_cast<int64_t>(active.size());
  if (n == 0) return Status::Ok();
  const int64_t n_vocab = model_->config().n_vocab;
  // step_rows_: [tokens | slots | seq ids | logit rows | RoPE positions], n each.
  step_rows_.resize(static_cast<size_t>(5 * n));
  int32_t* tokens = step_rows_.data();
  int32_t* slot = tokens + n;
  int32_t* seq = slot + n;
  int32_t* rows = seq + n;
  int32_t* rope_pos = rows + n;
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = active[i]->last_token();
    slot[i] = active[i]->cache()->n_filled();
    seq[i] = static_cast<int32_t>(i);
    rows[i] = static_cast<int32_t>(i);
    rope_pos[i] = slot[i] + active[i]->position_shift_;
  }
  step_logits_.resize(static_cast<size_t>(n * n_vocab));
  models::ForwardBatch b{.n_tokens = n, .tokens = tokens, .slot = slot, .seq = seq,
                         .logit_rows = rows, .n_logit_rows = n};
  b.rope_pos = rope_pos;
  b.check_finite = false;  // per row below: a bad sequence must not fail its batch neighbours
  VLMD_RETURN_IF_ERROR(model_->Forward(b, caches, &ctx_, step_logits_.data()));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = step_logits_.data() + i * n_vocab;
    if (Status finite = ops::CheckFinite(row, n_vocab, "logits"); !finite.ok()) {
      active[i]->Fail(std::move(finite));
      continue;
    }
    active[i]->Accept(std::span<const float>(row, n_vocab));
  }
  return Status::Ok();
}

Result<GenerateResult> VlmEngine::Generate(const PromptRows& rows, const GenerateParams& params,
                                            const TextCallback& on_text) {
  GenerateResult r;
  r.prompt_tokens = static_cast<int32_t>(rows.tokens.size());
  auto t0 = std::chrono::steady_clock::now();
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, StartSequence(rows, params));
  r.prefill_ms = MsSince(t0);
  t0 = std::chrono::steady_clock::now();
  Sequence* const one[] = {seq.get()};
  while (true) {
    const std::string chunk = seq->TakeNewText();
    if (!chunk.empty() && on_text && !on_text(chunk)) {
      seq->Finish("cancelled");
      break;
    }
    if (seq->finished()) break;
    VLMD_RETURN_IF_ERROR(DecodeStep(one));
  }
  VLMD_RETURN_IF_ERROR(seq->error());
  r.decode_ms = MsSince(t0);
  r.tokens = seq->tokens();
  r.text = seq->text();
  r.finish_reason = seq->finish_reason();
  r.token_stats = seq->token_stats();
  r.text_tokens = seq->text_tokens();
  return r;
}

}  // namespace vlmd::engine::runtime
