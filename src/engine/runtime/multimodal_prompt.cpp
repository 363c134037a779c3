// Multimodal prompt assembly (see multimodal_prompt.h).
#include "engine/runtime/multimodal_prompt.h"

#include <algorithm>

namespace vlmd::engine::runtime {
namespace {

// A prompt under construction: text is accumulated until an image slot forces it out.
// With M-RoPE (Qwen VL) it also keeps the position counter (FAMILIES.md): a text row takes
// [p, p, p, p] and advances it by 1; an image of a gw x gh merged grid starting at p0 gives token
// (r, c) [p0, p0 + r, p0 + c, 0] and advances it by max(gw, gh).
class RowBuilder {
 public:
  // count_only: images give rows without embeddings (token accounting before encoding).
  RowBuilder(const tokenizer::Tokenizer& tok, int64_t n_embd, bool mrope, bool count_only)
      : tok_(tok), n_embd_(n_embd), mrope_(mrope), count_only_(count_only) {}
  bool count_only() const { return count_only_; }

  // The family's wrapper text (parsed).
  void Text(std::string_view s) { pending_.Append(s); }
  // A piece of the prompt, its literal ranges kept.
  void Prompt(const tokenizer::PromptText& s) { pending_.AppendPrompt(s); }

  // `bidirectional`: the rows attend to each other both ways (PromptRows::bidirectional).
  Status Image(const float* rows, int64_t n_rows, bool bidirectional = false) {
    VLMD_RETURN_IF_ERROR(FlushTextBeforeImage());
    if (bidirectional) {
      out_.bidirectional.push_back({static_cast<int64_t>(out_.tokens.size()), n_rows});
    }
    for (int64_t i = 0; i < n_rows; ++i) out_.tokens.push_back(-1);
    if (!count_only_) out_.embeddings.insert(out_.embeddings.end(), rows, rows + n_rows * n_embd_);
    out_.n_image_tokens += n_rows;
    return Status::Ok();
  }

  // An M-RoPE image: rows of a grid_w x grid_h merged grid in raster order.
  Status GridImage(const float* rows, int32_t grid_w, int32_t grid_h) {
    VLMD_RETURN_IF_ERROR(FlushTextBeforeImage());  // the text before takes its positions first
    const int32_t p0 = next_pos_;
    VLMD_RETURN_IF_ERROR(Image(rows, int64_t{grid_w} * grid_h));
    for (int32_t r = 0; r < grid_h; ++r) {
      for (int32_t c = 0; c < grid_w; ++c) out_.rope_pos.insert(out_.rope_pos.end(), {p0, p0 + r, p0 + c, 0});
    }
    next_pos_ = p0 + std::max(grid_w, grid_h);
    return Status::Ok();
  }

  // Starts the prompt with BOS (when the vocabulary adds one) before any image rows; the text
  // pieces that follow are then tokenized without special additions.
  void LeadingBos() {
    if (first_ && tok_.vocab().add_bos()) AddTextRows({tok_.bos()});
    first_ = false;
  }

  Result<PromptRows> Finish() {
    VLMD_RETURN_IF_ERROR(FlushText());
    if (mrope_) {
      out_.position_shift = next_pos_ - static_cast<int32_t>(out_.tokens.size());
    } else {
      out_.rope_pos.clear();  // positions = rows
    }
    return std::move(out_);
  }

 private:
  void AddTextRows(const std::vector<int32_t>& ids) {
    out_.tokens.insert(out_.tokens.end(), ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size(); ++i, ++next_pos_) {
      out_.rope_pos.insert(out_.rope_pos.end(), {next_pos_, next_pos_, next_pos_, next_pos_});
    }
  }

  // The text before an image; an image that opens the prompt still comes after BOS (when the
  // vocabulary adds one), as llama.cpp's mtmd puts it.
  Status FlushTextBeforeImage() {
    if (pending_.empty()) {
      LeadingBos();
      return Status::Ok();
    }
    return FlushText();
  }

  Status FlushText() {
    if (pending_.empty()) return Status::Ok();
    VLMD_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          tok_.TokenizePrompt(pending_, /*add_special=*/first_));
    AddTextRows(ids);
    pending_.clear();
    first_ = false;
    return Status::Ok();
  }

  const tokenizer::Tokenizer& tok_;
  const int64_t n_embd_;
  const bool mrope_;
  const bool count_only_;
  int32_t next_pos_ = 0;
  tokenizer::PromptText pending_;
  bool first_ = true;
  PromptRows out_;
};

Status AddImage(RowBuilder* b, const models::VisionConfig& vision, const EncodedImage& img,
                int64_t n_embd) {
  if (models::IsQwenVl(vision.projector)) {
    // mtmd: "<|vision_start|>" ends the text before, "<|vision_end|>" starts the text after.
    const int64_t n = int64_t{img.layout.grid_cols} * img.layout.grid_rows;
    if (n <= 0 || (!b->count_only() && static_cast<int64_t>(img.embeddings.size()) != n * n_embd)) {
      return InvalidArgumentError("encoded image has inconsistent embedding size");
    }
    b->Text("<|vision_start|>");
    VLMD_RETURN_IF_ERROR(b->GridImage(img.embeddings.data(), img.layout.grid_cols, img.layout.grid_rows));
    b->Text("<|vision_end|>");
    return Status::Ok();
  }
  const int64_t tpt = img.tokens_per_tile;
  const int64_t n_tiles = img.layout.n_tiles;
  if (tpt <= 0 || n_tiles <= 0 ||
      (!b->count_only() && static_cast<int64_t>(img.embeddings.size()) != n_tiles * tpt * n_embd)) {
    return InvalidArgumentError("encoded image has inconsistent embedding size");
  }
  auto tile = [&](int64_t t) {
    return b->count_only() ? nullptr : img.embeddings.data() + t * tpt * n_embd;
  };
  if (vision.projector == models::ProjectorType::kGemma3) {
    // mtmd: "<start_of_image>" ends the text before, "<end_of_image>" starts the text after; the
    // image's rows see each other (llama.cpp decodes them with causal attention off).
    b->Text("<start_of_image>");
    VLMD_RETURN_IF_ERROR(b->Image(tile(0), n_tiles * tpt, /*bidirectional=*/true));
    b->Text("<end_of_image>");
    return Status::Ok();
  }
  if (vision.projector == models::ProjectorType::kInternvl) {
    // mtmd: "<img>" ends the text before, then the tiles and the thumbnail, "</img>" starts the
    // text after.
    b->Text("<img>");
    VLMD_RETURN_IF_ERROR(b->Image(tile(0), n_tiles * tpt));
    b->Text("</img>");
    return Status::Ok();
  }
  if (vision.projector != models::ProjectorType::kIdefics3) {
    return b->Image(tile(0), n_tiles * tpt);
  }
  const std::string fake = "<fake_token_around_image>";
  const int64_t grid = static_cast<int64_t>(img.layout.grid_rows) * img.layout.grid_cols;
  if (grid + (img.layout.has_global ? 1 : 0) != n_tiles) {
    return InvalidArgumentError("idefics3 image layout does not match its tile count");
  }
  for (int32_t r = 0; r < img.layout.grid_rows; ++r) {
    if (r > 0) b->Text("\n");
    for (int32_t c = 0; c < img.layout.grid_cols; ++c) {
      b->Text(fake + "<row_" + std::to_string(r + 1) + "_col_" + std::to_string(c + 1) + ">");
      VLMD_RETURN_IF_ERROR(b->Image(tile(static_cast<int64_t>(r) * img.layout.grid_cols + c), tpt));
    }
  }
  if (img.layout.has_global) {
    b->Text(grid > 0 ? "\n\n" + fake + "<global-img>" : fake + "<global-img>");
    VLMD_RETURN_IF_ERROR(b->Image(tile(grid), tpt));
    b->Text(fake);
  }
  return Status::Ok();
}

}  // namespace

namespace {

Result<PromptRows> BuildRows(const tokenizer::Tokenizer& tok, const models::VisionConfig& vision,
                             const tokenizer::PromptText& prompt,
                             std::span<const EncodedImage> images, int64_t n_embd,
                             std::string_view marker, bool count_only) {
  const std::string_view text = prompt.text();
  size_t n_markers = 0;
  for (size_t at = text.find(marker); at != std::string_view::npos;
       at = text.find(marker, at + marker.size())) {
    ++n_markers;
  }
  if (n_markers != 0 && n_markers != images.size()) {
    return InvalidArgumentError("the prompt has " + std::to_string(n_markers) + " image markers but " +
                                std::to_string(images.size()) + " images were given");
  }
  RowBuilder b(tok, n_embd, models::IsQwenVl(vision.projector), count_only);
  size_t next_image = 0;
  if (n_markers == 0) {  // no marker: (BOS,) images first, then the text
    b.LeadingBos();
    for (const EncodedImage& img : images) VLMD_RETURN_IF_ERROR(AddImage(&b, vision, img, n_embd));
    b.Prompt(prompt);
    return b.Finish();
  }
  size_t start = 0;
  for (size_t at = text.find(marker); at != std::string_view::npos; at = text.find(marker, start)) {
    b.Prompt(prompt.Slice(start, at));
    VLMD_RETURN_IF_ERROR(AddImage(&b, vision, images[next_image++], n_embd));
    start = at + marker.size();
  }
  b.Prompt(prompt.Slice(start, text.size()));
  return b.Finish();
}

}  // namespace

int64_t SpanSafeEnd(const PromptRows& rows, int64_t start, int64_t end) {
  for (const engine::ops::RowSpan& s : rows.bidirectional) {
    const int64_t s_end = s.start + s.len;
    if (s.start < end && end < s_end) return s.start > start ? s.start : s_end;
  }
  return end;
}

int64_t SpanSafePrefix(const PromptRows& rows, int64_t prefix) {
  for (const engine::ops::RowSpan& s : rows.bidirectional) {
    if (s.start < prefix && prefix < s.start + s.len) return s.start;
  }
  return prefix;
}

Result<PromptRows> BuildMultimodalPrompt(const tokenizer::Tokenizer& tok,
                                         const models::VisionConfig& vision,
                                         const tokenizer::PromptText& text,
                                         std::span<const EncodedImage> images, int64_t n_embd,
                                         std::string_view marker) {
  return BuildRows(tok, vision, text, images, n_embd, marker, /*count_only=*/false);
}

Result<int64_t> CountMultimodalPromptRows(const tokenizer::Tokenizer& tok,
                                          const models::VisionConfig& vision,
                                          const tokenizer::PromptText& text,
                                          std::span<const EncodedImage> layouts, int64_t n_embd,
                                          std::string_view marker) {
  VLMD_ASSIGN_OR_RETURN(PromptRows rows,
                        BuildRows(tok, vision, text, layouts, n_embd, marker, /*count_only=*/true));
  return static_cast<int64_t>(rows.tokens.size());
}

}  // namespace vlmd::engine::runtime
