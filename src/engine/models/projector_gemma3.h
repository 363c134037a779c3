// Gemma 3 projector: each tile's side x side patch rows averaged over k x k blocks (ggml's
// pool_2d AVG, kernel = stride = k), then RMSNorm (the vision epsilon) with mm.soft_emb_norm
// (stored as 1 + w, used as is), then mm.input_projection, no bias:
// [side x side, D] -> [(side/k)^2, D] -> [(side/k)^2, n_embd].
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/models/clip_vit.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

// The k x k average pool of one tile: in [side * side, d] (row-major grid) -> out
// [(side/k)^2, d], each sum taken over ky (outer) then kx, then divided by k * k.
void AveragePool(const float* in, int64_t side, int64_t d, int64_t k, float* out);

class Gemma3Projector {
 public:
  uint64_t packed_bytes() const { return ops::PackedBytes(packed_); }
  ops::PackingSummary packing() const { return ops::SummarizePacking(packed_); }
  uint64_t released_bytes() const { return 0; }  // the projection is an owned transposed copy
  uint64_t owned_bytes() const { return proj_bytes_.capacity(); }
  // Reads mm.soft_emb_norm.weight [D] and mm.input_projection.weight (GGUF ne [n_embd, D]: its
  // rows are vision features, so it is transposed into an owned copy, F16 kept as F16 for the
  // same rounding as llama.cpp's matmul). NOT_FOUND / INVALID_ARGUMENT / UNIMPLEMENTED for a
  // projection type other than F32 / F16.
  static Result<std::unique_ptr<Gemma3Projector>> Load(const gguf::GgufFile& file,
                                                       const VisionConfig& config,
                                                       const ops::WeightPacking& packing = {});

  int64_t tokens_per_tile(const ClipVit& vit) const { return vit.config().merged_tokens_per_tile(); }

  // vit_out [n_tiles * vit.n_positions(), d_vit] -> out [n_tiles * tokens_per_tile, n_embd].
  Status Project(const ClipVit& vit, const float* vit_out, int64_t n_tiles, VisionContext* ctx,
                 float* out) const;

 private:
  Gemma3Projector() = default;
  F32Weights norm_w_;                    // [D]
  std::vector<uint8_t, LargeAllocator<uint8_t>> proj_bytes_;  // owned transposed projection [n_embd rows of D]
  ops::WeightView proj_;                 // [D -> n_embd] over proj_bytes_
  ops::PackedStore packed_;
};

}  // namespace vlmd::engine::models
