// Type dispatch and argument checking for the row (de)quantizers; plain-float rows (F32, F16,
// BF16) are handled here, block formats in quantize_legacy.cpp and quantize_k.cpp.
#include "engine/tensor/quantize.h"

#include <cstring>
#include <limits>
#include <string>

#include "engine/tensor/finite.h"
#include "engine/tensor/fp16.h"

namespace vlmd::engine {
namespace {

// Adapters from the typed functions to the void* row signatures. Templates keep one definition
// per format without casts at every call site.
template <typename Block, void (*Fn)(const float*, Block*, int64_t)>
void QuantizeAdapter(const float* x, void* y, int64_t k) {
  Fn(x, static_cast<Block*>(y), k);
}
template <typename Block, void (*Fn)(const Block*, float*, int64_t)>
void DequantizeAdapter(const void* x, float* y, int64_t k) {
  Fn(static_cast<const Block*>(x), y, k);
}

void CopyF32(const float* x, void* y, int64_t k) {
  std::memcpy(y, x, static_cast<size_t>(k) * sizeof(float));
}
void CopyToF32(const void* x, float* y, int64_t k) {
  std::memcpy(y, x, static_cast<size_t>(k) * sizeof(float));
}
void ToF16(const float* x, void* y, int64_t k) { F32ToF16Row(x, static_cast<uint16_t*>(y), k); }
void FromF16(const void* x, float* y, int64_t k) {
  F16ToF32Row(static_cast<const uint16_t*>(x), y, k);
}
void ToBF16(const float* x, void* y, int64_t k) { F32ToBF16Row(x, static_cast<uint16_t*>(y), k); }
void FromBF16(const void* x, float* y, int64_t k) {
  BF16ToF32Row(static_cast<const uint16_t*>(x), y, k);
}

Status CheckRow(DType type, const void* x, const void* y, int64_t k) {
  const DTypeTraits& traits = GetDTypeTraits(type);
  if (k < 0 || k % traits.block_size != 0) {
    return InvalidArgumentError("row of " + std::to_string(k) + " values is not a multiple of " +
                                std::string(traits.name) + "'s block size " +
                                std::to_string(traits.block_size));
  }
  if (k > 0 && (x == nullptr || y == nullptr)) {
    return InvalidArgumentError("null row pointer");
  }
  return Status::Ok();
}

// A block format's scale of an inf is inf and its integers of inf * 0 are NaN converted to int
// (undefined behaviour): such rows are refused. The plain-float formats carry them as they are.
Status CheckEncodable(DType type, const float* x, int64_t k) {
  if (GetDTypeTraits(type).block_size == 1) return Status::Ok();
  const int64_t i = FindNonFinite(x, k);
  if (i < 0) return Status::Ok();
  return InvalidArgumentError("value " + std::string(NonFiniteName(x[i])) + " at index " +
                              std::to_string(i) + " of a row of " + std::to_string(k) +
                              ": " + std::string(DTypeName(type)) + " cannot encode inf or NaN");
}

// The checked quantizers' arguments: CheckRow's, then CheckEncodable's.
Status CheckQuantizeRow(DType type, const float* x, const void* y, int64_t k) {
  VLMD_RETURN_IF_ERROR(CheckRow(type, x, y, k));
  return CheckEncodable(type, x, k);
}

}  // namespace

QuantizeRowFn FindQuantizeRowFn(DType type) {
  using namespace quant;  // NOLINT(build/namespaces): the typed functions
  switch (type) {
    case DType::kF32: return CopyF32;
    case DType::kF16: return ToF16;
    case DType::kBF16: return ToBF16;
    case DType::kQ4_0: return QuantizeAdapter<BlockQ4_0, QuantizeRowQ4_0>;
    case DType::kQ4_1: return QuantizeAdapter<BlockQ4_1, QuantizeRowQ4_1>;
    case DType::kQ5_0: return QuantizeAdapter<BlockQ5_0, QuantizeRowQ5_0>;
    case DType::kQ8_0: return QuantizeAdapter<BlockQ8_0, QuantizeRowQ8_0>;
    case DType::kQ8_1: return QuantizeAdapter<BlockQ8_1, QuantizeRowQ8_1>;
    case DType::kQ4_K: return QuantizeAdapter<BlockQ4_K, QuantizeRowQ4_K>;
    case DType::kQ5_K: return QuantizeAdapter<BlockQ5_K, QuantizeRowQ5_K>;
    case DType::kQ6_K: return QuantizeAdapter<BlockQ6_K, QuantizeRowQ6_K>;
    case DType::kQ8_K: return QuantizeAdapter<BlockQ8_K, QuantizeRowQ8_K>;
    default: return nullptr;
  }
}

DequantizeRowFn FindDequantizeRowFn(DType type) {
  using namespace quant;  // NOLINT(build/namespaces)
  switch (type) {
    case DType::kF32: return CopyToF32;
    case DType::kF16: return FromF16;
    case DType::kBF16: return FromBF16;
    case DType::kQ4_0: return DequantizeAdapter<BlockQ4_0, DequantizeRowQ4_0>;
    case DType::kQ4_1: return DequantizeAdapter<BlockQ4_1, DequantizeRowQ4_1>;
    case DType::kQ5_0: return DequantizeAdapter<BlockQ5_0, DequantizeRowQ5_0>;
    case DType::kQ8_0: return DequantizeAdapter<BlockQ8_0, DequantizeRowQ8_0>;
    case DType::kQ8_1: return DequantizeAdapter<BlockQ8_1, DequantizeRowQ8_1>;
    case DType::kQ4_K: return DequantizeAdapter<BlockQ4_K, DequantizeRowQ4_K>;
    case DType::kQ5_K: return DequantizeAdapter<BlockQ5_K, DequantizeRowQ5_K>;
    case DType::kQ6_K: return DequantizeAdapter<BlockQ6_K, DequantizeRowQ6_K>;
    case DType::kQ8_K: return DequantizeAdapter<BlockQ8_K, DequantizeRowQ8_K>;
    case DType::kQ5_1: return DequantizeAdapter<BlockQ5_1, DequantizeRowQ5_1>;
    case DType::kIQ4_NL: return DequantizeAdapter<BlockIQ4_NL, DequantizeRowIQ4_NL>;
    case DType::kQ2_K: return DequantizeAdapter<BlockQ2_K, DequantizeRowQ2_K>;
    case DType::kQ3_K: return DequantizeAdapter<BlockQ3_K, DequantizeRowQ3_K>;
    case DType::kIQ4_XS: return DequantizeAdapter<BlockIQ4_XS, DequantizeRowIQ4_XS>;
    default: return nullptr;
  }
}

QuantizeRowFn FindActivationQuantizeFn(DType act_type) {
  using namespace quant;  // NOLINT(build/namespaces)
  switch (act_type) {
    case DType::kF32: return CopyF32;
    case DType::kF16: return ToF16;
    case DType::kBF16: return ToBF16;
    case DType::kQ8_0: return QuantizeAdapter<BlockQ8_0, QuantizeRowQ8_0Act>;
    case DType::kQ8_1: return QuantizeAdapter<BlockQ8_1, QuantizeRowQ8_1Act>;
    case DType::kQ8_K: return QuantizeAdapter<BlockQ8_K, QuantizeRowQ8_K>;
    default: return nullptr;
  }
}

Status QuantizeRow(DType type, const float* x, void* y, int64_t k) {
  const QuantizeRowFn fn = FindQuantizeRowFn(type);
  if (fn == nullptr) {
    return UnimplementedError("no quantizer for type " + std::string(DTypeName(type)));
  }
  VLMD_RETURN_IF_ERROR(CheckQuantizeRow(type, x, y, k));
  fn(x, y, k);
  return Status::Ok();
}

bool QuantizeUsesImportance(DType type) {
  return type == DType::kQ4_0 || type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K;
}

Status QuantizeRowWeighted(DType type, const float* x, void* y, int64_t k, const float* importance) {
  if (importance == nullptr || !QuantizeUsesImportance(type)) return QuantizeRow(type, x, y, k);
  VLMD_RETURN_IF_ERROR(CheckQuantizeRow(type, x, y, k));
  using namespace quant;  // NOLINT(build/namespaces)
  switch (type) {
    case DType::kQ4_0: QuantizeRowQ4_0(x, static_cast<BlockQ4_0*>(y), k, importance); break;
    case DType::kQ4_K: QuantizeRowQ4_K(x, static_cast<BlockQ4_K*>(y), k, importance); break;
    case DType::kQ5_K: QuantizeRowQ5_K(x, static_cast<BlockQ5_K*>(y), k, importance); break;
    case DType::kQ6_K: QuantizeRowQ6_K(x, static_cast<BlockQ6_K*>(y), k, importance); break;
    default: break;  // not reached: QuantizeUsesImportance
  }
  return Status::Ok();
}

Status DequantizeRow(DType type, const void* x, float* y, int64_t k) {
  const DequantizeRowFn fn = FindDequantizeRowFn(type);
  if (fn == nullptr) {
    return UnimplementedError("no dequantizer for type " + std::string(DTypeName(type)));
  }
  VLMD_RETURN_IF_ERROR(CheckRow(type, x, y, k));
  fn(x, y, k);
  return Status::Ok();
}

Result<uint64_t> QuantizeTensor(DType type, const float* src, int64_t n_rows, int64_t row_len,
                                void* out) {
  const QuantizeRowFn fn = FindQuantizeRowFn(type);
  if (fn == nullptr) {
    return UnimplementedError("no quantizer for type " + std::string(DTypeName(type)));
  }
  if (n_rows < 0) return InvalidArgumentError("negative row count " + std::to_string(n_rows));
  VLMD_RETURN_IF_ERROR(CheckRow(type, src, out, row_len));
  const uint64_t row_bytes = *RowBytes(type, row_len);  // valid: CheckRow passed
  const uint64_t n = static_cast<uint64_t>(n_rows);
  if (row_bytes != 0 && n > std::numeric_limits<uint64_t>::max() / row_bytes) {
    return OutOfRangeError("quantized tensor size overflows");
  }
  if (n > 0 && row_len > 0 && (src == nullptr || out == nullptr)) {
    return InvalidArgumentError("null tensor pointer");
  }
  uint8_t* dst = static_cast<uint8_t*>(out);
  for (int64_t r = 0; r < n_rows; ++r) {
    VLMD_RETURN_IF_ERROR(
        CheckEncodable(type, src + r * row_len, row_len).WithContext("row " + std::to_string(r)));
    fn(src + r * row_len, dst + static_cast<uint64_t>(r) * row_bytes, row_len);
  }
  return n * row_bytes;
}

}  // namespace vlmd::engine
