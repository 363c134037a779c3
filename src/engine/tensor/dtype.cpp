// Size traits of the ggml/GGUF tensor types (block sizes from ggml-common.h layouts).
#include "engine/tensor/dtype.h"

#include <array>
#include <cctype>
#include <string>

namespace vlmd::engine {
namespace {

// {type, name, block elements, block bytes, quantized, vlmd computes with it}
constexpr std::array<DTypeTraits, 22> kTraits = {{
    {DType::kF32, "f32", 1, 4, false, true},
    {DType::kF16, "f16", 1, 2, false, true},
    {DType::kQ4_0, "q4_0", 32, 18, true, true},     // half d; u8 qs[16]
    {DType::kQ4_1, "q4_1", 32, 20, true, true},     // half d, m; u8 qs[16]
    {DType::kQ5_0, "q5_0", 32, 22, true, true},     // half d; u8 qh[4]; u8 qs[16]
    {DType::kQ5_1, "q5_1", 32, 24, true, true},     // half d, m; u8 qh[4]; u8 qs[16]
    {DType::kQ8_0, "q8_0", 32, 34, true, true},     // half d; i8 qs[32]
    {DType::kQ8_1, "q8_1", 32, 36, true, false},    // half d, s; i8 qs[32]
    {DType::kQ2_K, "q2_K", 256, 84, true, true},    // u8 scales[16]; u8 qs[64]; half d, dmin
    {DType::kQ3_K, "q3_K", 256, 110, true, true},   // u8 hmask[32]; u8 qs[64]; u8 scales[12]; half d
    {DType::kQ4_K, "q4_K", 256, 144, true, true},   // half d, dmin; u8 scales[12]; u8 qs[128]
    {DType::kQ5_K, "q5_K", 256, 176, true, true},   // + u8 qh[32]
    {DType::kQ6_K, "q6_K", 256, 210, true, true},   // u8 ql[128]; u8 qh[64]; i8 scales[16]; half d
    {DType::kQ8_K, "q8_K", 256, 292, true, false},  // f32 d; i8 qs[256]; i16 bsums[16]
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true, true},  // half d; u8 qs[16]
    {DType::kIQ4_XS, "iq4_xs", 256, 136, true, true},  // half d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
    {DType::kI8, "i8", 1, 1, false, false},
    {DType::kI16, "i16", 1, 2, false, false},
    {DType::kI32, "i32", 1, 4, false, false},
    {DType::kI64, "i64", 1, 8, false, false},
    {DType::kF64, "f64", 1, 8, false, false},
    {DType::kBF16, "bf16", 1, 2, false, true},
}};

}  // namespace

std::optional<DTypeTraits> FindDTypeTraits(uint32_t raw_type) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == raw_type) return t;
  }
  return std::nullopt;
}

const DTypeTraits& GetDTypeTraits(DType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  return kTraits[0];  // unreachable for valid enum values
}

std::string_view DTypeName(DType type) { return GetDTypeTraits(type).name; }

std::optional<DType> ParseDType(std::string_view name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : kTraits) {
    std::string tn;
    for (char c : t.name) tn += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (tn == lower) return t.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> RowBytes(DType type, int64_t n_elements) {
  const auto& t = GetDTypeTraits(type);
  if (n_elements < 0 || n_elements % t.block_size != 0) return std::nullopt;
  return static_cast<uint64_t>(n_elements / t.block_size) * static_cast<uint64_t>(t.block_bytes);
}

}  // namespace vlmd::engine
