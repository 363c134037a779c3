// Idefics3 / SmolVLM projector: pixel shuffle (space-to-depth) by scale factor s, then the linear
// mm.model.fc (no bias): [side x side, D] -> [(side/s)^2, D*s*s] -> [(side/s)^2, n_embd].
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/models/clip_vit.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

// Pixel shuffle of one tile in llama.cpp's element order: input rows are patches (row-major over
// a side x side grid) of width d; output token (gy, gx) = gy * (side/s) + gx has width d*s*s with
// element (dy * s + dx) * d + i = input patch (gy*s + dy, gx*s + dx), channel i.
// Preconditions (checked by the caller): side % s == 0. in and out must not overlap.
void PixelShuffle(const float* in, int64_t side, int64_t d, int64_t s, float* out);

class Idefics3Projector {
 public:
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }  // packed copies
  ops::PackingSummary packing() const { return ops::SummarizePacking(packed_); }
  uint64_t released_bytes() const { return released_; }  // GGUF pages dropped after packing
  // Reads mm.model.fc.weight [d_vit * s * s -> n_embd_text]. NOT_FOUND / INVALID_ARGUMENT.
  static Result<std::unique_ptr<Idefics3Projector>> Load(const gguf::GgufFile& file,
                                                         const VisionConfig& config,
                                                         const ops::WeightPacking& packing = {});

  int64_t tokens_per_tile(const ClipVit& vit) const { return vit.config().merged_tokens_per_tile(); }

  // vit_out [n_tiles * vit.n_positions(), d_vit] -> out [n_tiles * tokens_per_tile, n_embd].
  Status Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles, VisionContext* ctx,
                 float* out) const;

 private:
  Idefics3Projector() = default;
  ops::WeightView fc_;
  ops::PackedStore packed_;
  uint64_t released_ = 0;
};

}  // namespace vlmd::engine::models
