// Multimodal prompts: text with image markers (default "<__media__>", as llama.cpp) becomes the
// row sequence the decoder consumes: token ids, and for each image its visual-token embeddings
// wrapped in the family's text tokens (Idefics3: <fake_token_around_image><row_R_col_C> before
// each tile, "\n" between tile rows, then "\n\n<fake_token_around_image><global-img>", the global
// image and "<fake_token_around_image>"; LLaVA: the embeddings alone; Qwen VL:
// "<|vision_start|>", the merged grid's embeddings with M-RoPE positions, "<|vision_end|>").
// Adjacent text is merged
// and tokenized as one piece (special tokens parsed, except in the text's literal ranges:
// PromptText; BOS only before the first piece), which is how llama.cpp's mtmd_tokenize builds
// its chunks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/models/preprocess_vision.h"
#include "engine/models/vision_config.h"
#include "engine/ops/attention.h"
#include "engine/tokenizer/prompt_text.h"
#include "engine/tokenizer/tokenizer.h"

namespace vlmd::engine::runtime {

inline constexpr std::string_view kDefaultMediaMarker = "<__media__>";

// One image after encoding: its tiles' embeddings [n_tiles * tokens_per_tile, n_embd], in tile
// order (row-major tiles, then the global image).
struct EncodedImage {
  models::PreprocessedImage layout;  // grid and tile count (pixels may be cleared)
  int64_t tokens_per_tile = 0;
  std::vector<float> embeddings;
};

// The decoder input: tokens[i] < 0 marks an embedding row; those rows' vectors are the rows of
// `embeddings` in order. n_image_tokens counts them.
struct PromptRows {
  std::vector<int32_t> tokens;
  std::vector<float> embeddings;  // [n_image_tokens, n_embd]
  int64_t n_image_tokens = 0;
  // RoPE positions, for M-RoPE families whose image rows do not advance the position counter one
  // by one: [n_rows, 4] (t, h, w, e) per row. Empty: row i has position i.
  std::vector<int32_t> rope_pos;
  // The position counter after the prompt minus its row count (<= 0: an M-RoPE image of
  // grid_w x grid_h rows advances it by max(grid_w, grid_h)); a generated row in KV slot s has
  // position s + position_shift.
  int32_t position_shift = 0;
  // Rows that attend to each other in both directions (Gemma 3: each image's rows), in order,
  // not overlapping. A prefill chunk never cuts one (SpanSafeEnd), and a reused prefix never
  // ends inside one.
  std::vector<engine::ops::RowSpan> bidirectional;
};

// `end` moved so that [start, end) cuts no bidirectional span of `rows`: back to the start of a
// span it would cut, or past its end when the span starts at `start` (a chunk then holds at
// least one whole span, whatever its size).
int64_t SpanSafeEnd(const PromptRows& rows, int64_t start, int64_t end);
// `prefix` moved back to the start of a bidirectional span it would end inside.
int64_t SpanSafePrefix(const PromptRows& rows, int64_t prefix);

// Builds the rows for `text` with one marker per image (markers beyond the images are an error;
// with no marker at all the images go before the text). INVALID_ARGUMENT when markers and images
// do not match or an image's embedding size is inconsistent.
Result<PromptRows> BuildMultimodalPrompt(const tokenizer::Tokenizer& tok,
                                         const models::VisionConfig& vision,
                                         const tokenizer::PromptText& text,
                                         std::span<const EncodedImage> images, int64_t n_embd,
                                         std::string_view marker = kDefaultMediaMarker);

// The number of rows BuildMultimodalPrompt gives for the same arguments, from the images'
// layouts alone (layout and tokens_per_tile; embeddings may be empty): the one token count for
// budgets, stream windows and the real prompt, the family's wrapper tokens included.
Result<int64_t> CountMultimodalPromptRows(const tokenizer::Tokenizer& tok,
                                          const models::VisionConfig& vision,
                                          const tokenizer::PromptText& text,
                                          std::span<const EncodedImage> layouts, int64_t n_embd,
                                          std::string_view marker = kDefaultMediaMarker);

}  // namespace vlmd::engine::runtime
