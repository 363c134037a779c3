// Typed metadata getters of GgufFile: type checks and range-checked integer conversions.
#include <cmath>
#include <limits>
#include <string>

#include "engine/gguf/gguf_reader.h"

namespace vlmd::engine::gguf {
namespace {

bool IsIntegerType(ValueType t) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kUint16: case ValueType::kInt16:
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kUint64: case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool IsSignedType(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}

std::string TypeMismatch(std::string_view key, const MetadataValue& v, std::string_view wanted) {
  std::string have(ValueTypeName(v.type));
  if (v.type == ValueType::kArray) have += " of " + std::string(ValueTypeName(v.array_type));
  return "key '" + std::string(key) + "' has type " + have + ", expected " + std::string(wanted);
}

std::string ValueString(const MetadataValue& v) {
  return IsSignedType(v.type) ? std::to_string(v.i) : std::to_string(v.u);
}

// Converts an integer value to T when it fits; false otherwise.
template <typename T>
bool IntegerFits(const MetadataValue& v, T* out) {
  if (IsSignedType(v.type)) {
    if (v.i < static_cast<int64_t>(std::numeric_limits<T>::min())) return false;
    if (v.i > 0 && static_cast<uint64_t>(v.i) > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return false;
    }
    *out = static_cast<T>(v.i);
    return true;
  }
  if (v.u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  *out = static_cast<T>(v.u);
  return true;
}

template <typename T>
Result<T> GetInteger(const GgufFile& f, std::string_view key, std::string_view wanted) {
  const MetadataValue* v = f.Find(key);
  if (v == nullptr) return NotFoundError("key '" + std::string(key) + "' not found");
  if (!IsIntegerType(v->type)) return InvalidArgumentError(TypeMismatch(key, *v, wanted));
  T out{};
  if (!IntegerFits(*v, &out)) {
    return OutOfRangeError("key '" + std::string(key) + "' value " + ValueString(*v) +
                           " does not fit in " + std::string(wanted));
  }
  return out;
}

Result<const MetadataValue*> FindArray(const GgufFile& f, std::string_view key) {
  const MetadataValue* v = f.Find(key);
  if (v == nullptr) return NotFoundError("key '" + std::string(key) + "' not found");
  if (v->type != ValueType::kArray) {
    return InvalidArgumentError(TypeMismatch(key, *v, "array"));
  }
  return v;
}

}  // namespace

Result<std::string_view> GgufFile::GetString(std::string_view key) const {
  const MetadataValue* v = Find(key);
  if (v == nullptr) return NotFoundError("key '" + std::string(key) + "' not found");
  if (v->type != ValueType::kString) return InvalidArgumentError(TypeMismatch(key, *v, "string"));
  return v->str;
}

Result<uint32_t> GgufFile::GetU32(std::string_view key) const {
  return GetInteger<uint32_t>(*this, key, "u32");
}

Result<int64_t> GgufFile::GetI64(std::string_view key) const {
  return GetInteger<int64_t>(*this, key, "i64");
}

Result<float> GgufFile::GetF32(std::string_view key) const {
  const MetadataValue* v = Find(key);
  if (v == nullptr) return NotFoundError("key '" + std::string(key) + "' not found");
  if (v->type == ValueType::kFloat32 || v->type == ValueType::kFloat64) {
    // No hyperparameter is meant to be infinite or NaN: an inf epsilon or image std ran the model
    // silently wrong (zero logits, embeddings blind to the image).
    if (!std::isfinite(v->f) || std::fabs(v->f) > std::numeric_limits<float>::max()) {
      return OutOfRangeError("key '" + std::string(key) + "' value " + std::to_string(v->f) +
                             " is not a finite f32");
    }
    return static_cast<float>(v->f);
  }
  if (IsIntegerType(v->type)) {
    return IsSignedType(v->type) ? static_cast<float>(v->i) : static_cast<float>(v->u);
  }
  return InvalidArgumentError(TypeMismatch(key, *v, "f32"));
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const MetadataValue* v = Find(key);
  if (v == nullptr) return NotFoundError("key '" + std::string(key) + "' not found");
  if (v->type != ValueType::kBool) return InvalidArgumentError(TypeMismatch(key, *v, "bool"));
  return v->u != 0;
}

Result<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  VLMD_ASSIGN_OR_RETURN(const MetadataValue* v, FindArray(*this, key));
  if (v->array_type != ValueType::kString) {
    return InvalidArgumentError(TypeMismatch(key, *v, "array of string"));
  }
  std::vector<std::string_view> out;
  out.reserve(static_cast<size_t>(v->array_count));  // bounded by the file's bytes (8 each at least)
  VisitArrayElements(*v, UINT64_MAX, [&](const MetadataValue& e) { out.push_back(e.str); });
  return out;
}

Result<std::vector<float>> GgufFile::GetF32Array(std::string_view key) const {
  VLMD_ASSIGN_OR_RETURN(const MetadataValue* v, FindArray(*this, key));
  if (v->array_type != ValueType::kFloat32 && v->array_type != ValueType::kFloat64) {
    return InvalidArgumentError(TypeMismatch(key, *v, "array of f32"));
  }
  std::vector<float> out;
  out.reserve(static_cast<size_t>(v->array_count));  // bounded by the file's bytes
  VisitArrayElements(*v, UINT64_MAX, [&](const MetadataValue& e) { out.push_back(static_cast<float>(e.f)); });
  return out;
}

Result<std::vector<int32_t>> GgufFile::GetI32Array(std::string_view key) const {
  VLMD_ASSIGN_OR_RETURN(const MetadataValue* v, FindArray(*this, key));
  if (!IsIntegerType(v->array_type)) {
    return InvalidArgumentError(TypeMismatch(key, *v, "array of i32"));
  }
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(v->array_count));  // bounded by the file's bytes
  Status error;
  VisitArrayElements(*v, UINT64_MAX, [&](const MetadataValue& e) {
    int32_t x = 0;
    if (error.ok() && !IntegerFits(e, &x)) {
      error = OutOfRangeError("key '" + std::string(key) + "' element " +
                              std::to_string(out.size()) + " value " + ValueString(e) +
                              " does not fit in i32");
    }
    out.push_back(x);
  });
  if (!error.ok()) return error;
  return out;
}

}  // namespace vlmd::engine::gguf
