// The VLM engine over one loaded model: tokenizer, text decoder, vision encoder and sampler.
// Used by vlmd-run and vlmd-bench; the server's scheduler drives the same model API in batches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_key.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/models/text_decoder.h"
#include "engine/image/image.h"
#include "engine/models/vision_encoder.h"
#include "engine/runtime/multimodal_prompt.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/sequence.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace vlmd::engine::runtime {

struct EngineOptions {
  std::string mmproj_path;  // vision encoder + projector GGUF; empty: text only
  int32_t threads = 0;     // 0: all cores
  int32_t n_ctx = 4096;    // positions per sequence
  int32_t n_batch = 512;   // prompt rows per forward call
  // kExact: the parity reference (the library default); kFast: float weights on the packed int8
  // matmul too (the tools' default). See ops::Precision.
  ops::Precision precision = ops::Precision::kExact;
  // The prefill attention's scratch (f32 K and V^T of every kv head: ~270 MB at 32k positions
  // with 8 kv heads of 128) is freed when a prompt is complete if it holds more than this, so
  // that one long prompt does not keep it for the engine's lifetime; smaller ones are reused.
  uint64_t max_idle_scratch_bytes = uint64_t{64} << 20;
  // Where the key of a sealed model file comes from (asked only when a file is sealed).
  ModelKeySource model_key;
  // Compute files_sha256() while loading (the server's model_hash); off for one-shot tools.
  bool hash_files = false;
  // The most the packed copies of the weights may take (ops::PackedBytesCap; the server passes
  // what its memory budget leaves): past it the load stops with RESOURCE_EXHAUSTED.
  uint64_t max_packed_bytes = UINT64_MAX;
  std::string max_packed_bytes_hint;  // where that cap comes from, for its error
};

struct GenerateResult {
  std::vector<int32_t> tokens;        // generated ids (incl. a final EOS, if one ended it)
  std::string text;                   // detokenized, cut at a stop string
  std::string finish_reason;          // "stop" (EOS / stop string) or "length"
  std::vector<TokenStats> token_stats;  // one per generated token when params.token_stats
  size_t text_tokens = 0;             // tokens the text holds (Sequence::text_tokens)
  int32_t prompt_tokens = 0;
  double prefill_ms = 0.0;
  double decode_ms = 0.0;
};

struct ImageTimings {
  double decode_ms = 0.0;      // encoded bytes -> RGB
  double preprocess_ms = 0.0;  // RGB -> normalized tiles
  double encode_ms = 0.0;      // ViT + projector
};

// An image decoded and preprocessed, ready for the encoder. `key` identifies the pixels and the
// preprocessing (the visual-embedding cache key); source size is the decoded image's.
struct PreparedImage {
  std::string key;
  int32_t source_width = 0;
  int32_t source_height = 0;
  models::PreprocessedImage tiles;
};

// Called with each new chunk of valid UTF-8 text; return false to stop generating (cancel).
using TextCallback = std::function<bool(std::string_view)>;

class VlmEngine {
 public:
  // Opens and validates the model. NOT_FOUND / DATA_LOSS / UNIMPLEMENTED from the loaders;
  // INVALID_ARGUMENT for bad options or VLMD_FORCE_ISA.
  static Result<std::unique_ptr<VlmEngine>> Load(const std::string& model_path,
                                                  const EngineOptions& opts);

  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const models::TextDecoder& model() const { return *model_; }
  // The vision encoder, or nullptr for a text-only engine.
  const models::VisionEncoder* vision() const { return vision_.get(); }
  ThreadPool& pool() { return *pool_; }
  // SHA-256 (hex) of the text file's then the mmproj's plaintext bytes, when hash_files was set.
  const std::string& files_sha256() const { return files_sha256_; }
  // Whether a file was sealed (decrypted into memory at load), and whether all such memory is
  // locked against swapping.
  bool decrypted() const { return decrypted_; }
  bool decrypted_locked() const { return decrypted_locked_; }
  kernels::Isa isa() const { return ctx_.kernels->isa; }
  std::string_view isa_name() const;

  // Decodes, preprocesses and encodes one image file's bytes into visual-token embeddings.
  // FAILED_PRECONDITION without an mmproj; the image module's errors for bad images.
  Result<EncodedImage> EncodeImage(std::span<const uint8_t> bytes, ImageTimings* timings);

  // The two halves of EncodeImage, for callers that run them on different threads: Prepare is
  // const and thread-safe (decode + preprocess, no engine state); Encode runs the vision encoder
  // on the engine's pool (same threading rule as Generate). `level` > 0 shrinks the image by
  // that many of the family's steps (models::ImagePlan; token budgets); fixed-size families
  // have level 0 only (higher levels are clamped).
  Result<PreparedImage> PrepareImage(std::span<const uint8_t> bytes, const image::DecodeLimits& limits,
                                     int32_t level, ImageTimings* timings) const;
  // PrepareImage in two steps, for callers that choose the level from the decoded size (token
  // budgets) with PlanImage / MaxShrinkLevel, computed without touching pixels.
  Result<PreparedImage> PreprocessDecoded(const image::Image& img, int32_t level,
                                          ImageTimings* timings) const;
  // The vision family's plan of a width x height image at `level`, and its highest level
  // (no vision encoder: an empty plan, 0).
  models::ImagePlan PlanImage(int32_t width, int32_t height, int32_t level) const;
  int32_t MaxShrinkLevel(int32_t width, int32_t height) const;
  // PlanImage of every level [0, MaxShrinkLevel]; empty without a vision encoder.
  std::vector<models::ImagePlan> PlanLevels(int32_t width, int32_t height) const;
  // The prompt rows BuildPrompt(raw) gives for `prompt` (markers included) with `images` in
  // marker order: already encoded ones (their layouts) then planned ones, wrapper text tokens
  // included, without encoding anything (token budgets). Errors as BuildPrompt.
  Result<int64_t> CountPromptRows(const tokenizer::PromptText& prompt,
                                  std::span<const EncodedImage> encoded,
                                  std::span<const models::ImagePlan> planned) const;
  Result<EncodedImage> EncodePrepared(const PreparedImage& image, ImageTimings* timings);
  // In work units, for a scheduler that interleaves image encoding with decode steps
  // (models::ImageEncoding: a tile, or a Qwen VL ViT block): BeginEncode (`image` must outlive
  // the encoding), EncodeUnits until done(), then EncodedFrom makes the image. Errors as
  // EncodePrepared; a failed encoding is unusable.
  Result<std::unique_ptr<models::ImageEncoding>> BeginEncode(const PreparedImage& image) const;
  Status EncodeUnits(models::ImageEncoding* encoding, int64_t max_units);
  EncodedImage EncodedFrom(const PreparedImage& image, models::ImageEncoding* encoding) const;

  // Token ids (and image rows) of a user prompt: `text` with image markers, wrapped in the
  // model's chat template as the user's words (control-token text in it read as text) unless
  // raw (then BOS as the vocabulary says, special text parsed outside `text`'s literal ranges).
  Result<PromptRows> BuildPrompt(const tokenizer::PromptText& text,
                                 std::span<const EncodedImage> images, bool raw) const;

  // The model's chat template applied to a conversation, with the assistant turn opened, each
  // message's content marked literal (PromptText). Image markers in the messages are kept.
  // Thread-safe (const).
  tokenizer::PromptText ApplyChatTemplate(std::span<const tokenizer::ChatMessage> messages) const;

  // True when the model's tokenizer.chat_template is absent or not one vlmd recognises, so that
  // BuildPrompt (not raw) falls back to ChatML; callers should warn.
  bool chat_template_is_fallback() const;

  // Prefills `prompt` into a fresh sequence and returns the logits of its last position.
  Result<std::vector<float>> PromptLogits(std::span<const int32_t> prompt);
  Result<std::vector<float>> PromptLogits(const PromptRows& prompt);

  // Prefills `prompt` into a fresh sequence and hands the logits of the rows `wanted` accepts
  // (null: every row) to `on_row` (row index, n_vocab logits), in row order; the head runs on
  // those rows only (quantization quality: vlmd-quantize eval). Errors as PromptLogits, or
  // on_row's.
  using RowLogitsFn = std::function<Status(int64_t row, std::span<const float> logits)>;
  using RowFilterFn = std::function<bool(int64_t row)>;
  Status PromptRowLogits(const PromptRows& prompt, const RowFilterFn& wanted,
                         const RowLogitsFn& on_row);

  // Makes every later forward call show its decoder matrices' inputs to `observer` (null: none;
  // calibration, vlmd-quantize calibrate). The observer must outlive its use.
  void set_matmul_observer(models::MatmulInputObserver* observer) { ctx_.observer = observer; }

  // Prefills `prompt`, then samples up to max_tokens. Not thread-safe (one call at a time).
  // INVALID_ARGUMENT for an empty prompt, bad ids or params; RESOURCE_EXHAUSTED when the prompt
  // plus max_tokens does not fit n_ctx; INTERNAL on NaN/Inf logits.
  Result<GenerateResult> Generate(std::span<const int32_t> prompt, const GenerateParams& params,
                                  const TextCallback& on_text = {});
  Result<GenerateResult> Generate(const PromptRows& prompt, const GenerateParams& params,
                                  const TextCallback& on_text = {});

  // Batched generation (the server's scheduler). StartSequence validates, prefills `prompt` into a
  // new sequence and samples its first token (same errors as Generate). DecodeStep advances every
  // unfinished, fully prefilled sequence in `seqs` by one token in ONE forward pass (continuous
  // batching: callers may add and drop sequences between steps). Greedy results equal Generate's token for token.
  // INTERNAL on NaN/Inf (the whole step fails; callers end the sequences of that step).
  // `prefix`, when given, holds K/V valid for the first `prefix_len` rows of `prompt` (a finished
  // sequence's cache whose rows the caller matched): those rows are copied, not recomputed.
  // prefix_len must be < the prompt's length (the last row is always computed for its logits).
  Result<std::unique_ptr<Sequence>> StartSequence(const PromptRows& prompt,
                                                  const GenerateParams& params,
                                                  const models::KvCache* prefix = nullptr,
                                                  int32_t prefix_len = 0);
  // The same in two phases, for a scheduler that interleaves long prompts with the decode steps
  // of other sequences (chunked prefill): BeginSequence validates and copies the reused prefix
  // but computes nothing (the sequence is prefilling()); each PrefillChunk computes up to
  // max_rows more prompt rows and, with the last one, samples the first token. Errors as
  // StartSequence; a failed chunk leaves the sequence unusable.
  Result<std::unique_ptr<Sequence>> BeginSequence(PromptRows prompt, const GenerateParams& params,
                                                  const models::KvCache* prefix = nullptr,
                                                  int32_t prefix_len = 0);
  Status PrefillChunk(Sequence* seq, int64_t max_rows);
  Status DecodeStep(std::span<Sequence* const> seqs);
  const EngineOptions& options() const { return opts_; }
  // Bytes held by the forward and vision-encoder scratch buffers (activations), as of the last
  // call. Owner thread.
  uint64_t activation_bytes() const;

 private:
  VlmEngine() = default;
  EncodedImage EncodedFromTiles(const PreparedImage& image, std::vector<float> embeddings) const;
  // Runs prompt rows [first_row, end_row) (end_row < 0: to the end) through the model in n_batch
  // chunks (rows before first_row are already in the cache); `logits` receives the last row's
  // logits when end_row is the prompt's end (may be null otherwise).
  // With `rows_out`, the logits of the rows it wants go to it instead (`logits` unused).
  struct RowLogitsRequest {
    const RowFilterFn* wanted;  // null: every row
    const RowLogitsFn* on_row;
  };
  Status Prefill(const PromptRows& prompt, models::KvCache* cache, float* logits,
                 int64_t first_row = 0, int64_t end_row = -1,
                 const RowLogitsRequest* rows_out = nullptr);
  // INVALID_ARGUMENT for an empty prompt, RESOURCE_EXHAUSTED for one longer than n_ctx.
  Status CheckPromptFits(const PromptRows& rows) const;
  // The most rows one forward call adds to a sequence of `rows`: n_batch, or a whole image that
  // attends both ways (a chunk takes all of one); sizes its sliding-window rings.
  int32_t MaxBatchRows(const PromptRows& rows) const;

  EngineOptions opts_;
  std::unique_ptr<ThreadPool> pool_;
  std::string files_sha256_;
  bool decrypted_ = false;
  bool decrypted_locked_ = true;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<models::TextDecoder> model_;
  std::unique_ptr<models::VisionEncoder> vision_;
  std::string chat_template_source_;  // tokenizer.chat_template, may be empty
  models::ForwardContext ctx_;
  std::vector<float> step_logits_;   // [n_seqs, n_vocab] of the last DecodeStep
  std::vector<int32_t> step_rows_;   // tokens, positions, seq ids, logit rows of DecodeStep
  models::VisionContext vision_ctx_;
};

}  // namespace vlmd::engine::runtime
