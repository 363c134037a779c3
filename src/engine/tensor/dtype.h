// Tensor element types with ggml-compatible ids and block layouts, and their size traits.
// The numeric ids are the ones GGUF files store (ggml_type), so they must never change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace vlmd::engine {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct DTypeTraits {
  DType type;
  std::string_view name;    // ggml spelling, e.g. "q4_K", "f16"
  int32_t block_size;       // elements per block (1 for plain types)
  int32_t block_bytes;      // bytes per block
  bool quantized;
  bool compute_supported;   // vlmd has dequantize/matmul for it (others: size known, load refused)
};

// Traits for a raw GGUF type id; nullopt when the id is unknown (the file is then rejected).
std::optional<DTypeTraits> FindDTypeTraits(uint32_t raw_type);
// Traits of a known enum value (never fails for the values above).
const DTypeTraits& GetDTypeTraits(DType type);
std::string_view DTypeName(DType type);
// Parses "q4_0", "Q4_0", "f16", "bf16"...; nullopt when unknown.
std::optional<DType> ParseDType(std::string_view name);

// Bytes of one row of `n_elements` values, or nullopt when n_elements is not a multiple of the
// block size (a file that claims so is corrupt).
std::optional<uint64_t> RowBytes(DType type, int64_t n_elements);

}  // namespace vlmd::engine
