// llama.cpp's importance matrix ("imatrix"): per weight matrix, the sum of squares of the
// activations that met each of its input columns, and how many activation rows (tokens) were
// summed, so that quantization can weigh the error of each column by how large its inputs are.
//
// Two file formats, both read; GGUF is written (what llama-imatrix writes by default, and what
// llama-quantize --imatrix reads first):
// - GGUF: general.type "imatrix"; keys imatrix.datasets (string array), imatrix.chunk_count and
//   imatrix.chunk_size (u32); per matrix NAME two F32 tensors, "NAME.in_sum2" [n_cols, n_mat]
//   (raw sums of x^2) and "NAME.counts" [1, n_mat] (rows summed), n_mat > 1 for the experts of
//   a mixture-of-experts matrix (llama.cpp tools/imatrix/imatrix.cpp, save_imatrix).
// - Legacy binary (.dat, native little-endian): i32 n_entries; per entry i32 name length, the
//   name, i32 ncall, i32 nval, nval f32 values (mean x^2 times ncall); then optionally i32 chunk
//   count, i32 length and a dataset name (save_imatrix_legacy). Read as counts = {ncall} and
//   sums = the values, as llama.cpp's loader does (common/imatrix-loader.cpp).
// The importance a quantizer gets is the mean of x^2 per column, per expert (sum / count; 1 where
// a count is 0), as llama-quantize computes it (tools/quantize/quantize.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlmd::engine::gguf {

struct ImatrixEntry {
  int64_t n_cols = 0;           // input columns of the matrix (its ne[0])
  std::vector<float> sum_sq;    // [n_mat][n_cols]: sums of x^2
  std::vector<float> counts;    // [n_mat]: activation rows summed
};

struct ImportanceMatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight name ("blk.0.attn_q.weight")
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0;
  uint32_t chunk_size = 0;

  // The importance of `name`'s columns: mean x^2 per column, [n_mat * n_cols]; empty when the
  // matrix has no entry.
  std::vector<float> Importance(const std::string& name) const;
};

// Either format, told apart by the GGUF magic. DATA_LOSS naming what is wrong for a truncated
// or malformed file: unpaired or misshapen tensors, non-F32 data, negative or non-finite values,
// counts that do not fit the sums, entry names or sizes beyond the limits of a real model.
Result<ImportanceMatrix> ParseImatrix(std::span<const uint8_t> bytes);
Result<ImportanceMatrix> ReadImatrixFile(const std::string& path);

// The GGUF form, entries sorted by name (llama.cpp's reader and vlmd's read it).
// INVALID_ARGUMENT when an entry's sizes disagree or its name is too long for a GGUF tensor.
Result<std::vector<uint8_t>> SerializeImatrix(const ImportanceMatrix& m);
Status WriteImatrixFile(const ImportanceMatrix& m, const std::string& path);

}  // namespace vlmd::engine::gguf
