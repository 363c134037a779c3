// Read-only view of a GGUF v2/v3 file (the llama.cpp model format), memory-mapped, zero-copy.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
// key/value pairs (gguf string key, u32 value type, value), then n_tensors tensor infos
// (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset), padding to `alignment`
// (key general.alignment, default 32), then the tensor data; offsets are relative to it.
// Every count, length and offset is checked against the file size and for overflow: a hostile or
// truncated file yields a DATA_LOSS / UNIMPLEMENTED Status naming the problem, never a crash.
//
// Thread safety: a GgufFile is immutable after Open(); share it freely across threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/tensor/dtype.h"

namespace vlmd {
class SecureBuffer;
}

namespace vlmd::engine::gguf {

// GGUF metadata value types (gguf_type in ggml).
enum class ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
std::string_view ValueTypeName(ValueType t);

// One metadata value. Scalars are stored decoded; strings and arrays point into the mapping.
struct MetadataValue {
  ValueType type = ValueType::kUint8;
  // Scalar payload (valid when type is a scalar): integers widened, floats as double.
  int64_t i = 0;        // signed view of any integer type (u64 values above INT64_MAX: see u)
  uint64_t u = 0;       // unsigned view of any integer type / bool
  double f = 0.0;       // float32 / float64
  std::string_view str; // kString
  // kArray: element type, count, and the raw bytes of the elements (strings: each u64 len + bytes).
  ValueType array_type = ValueType::kUint8;
  uint64_t array_count = 0;
  std::span<const uint8_t> array_bytes;
};

// Decodes up to `max_elements` leading elements of an array value as scalar MetadataValues
// (strings point into the mapping, so they live as long as the GgufFile). Empty for a non-array.
// Never fails: the reader validated the element bytes when the file was opened.
std::vector<MetadataValue> ArrayElements(const MetadataValue& array,
                                         uint64_t max_elements = UINT64_MAX);
// The same elements one at a time, none kept: what the getters use, so that a large array costs
// its result only (a MetadataValue is ~80 bytes; 20M one-byte elements were 1.7 GB).
void VisitArrayElements(const MetadataValue& array, uint64_t max_elements,
                        const std::function<void(const MetadataValue&)>& visit);

struct MetadataEntry {
  std::string_view key;
  MetadataValue value;
};

struct TensorInfo {
  std::string_view name;
  DType type = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};   // ggml order: ne[0] is the innermost (row length)
  uint64_t offset = 0;            // relative to the start of the data section
  uint64_t nbytes = 0;            // checked: fits inside the file
  const uint8_t* data = nullptr;  // points into the mapping
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

struct OpenOptions {
  // Upper bounds that protect against absurd headers before any allocation.
  uint64_t max_kv = 1u << 20;
  uint64_t max_tensors = 1u << 20;
  uint64_t max_string_bytes = 64u << 20;
};

class GgufFile {
 public:
  // Maps `path` read-only. NOT_FOUND if missing; DATA_LOSS/UNIMPLEMENTED on a bad file.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path, const OpenOptions& opts = {});
  // Parses an in-memory image (copied into an owned buffer; used by tests and the fuzzer).
  static Result<std::unique_ptr<GgufFile>> FromBytes(std::span<const uint8_t> bytes,
                                                     const OpenOptions& opts = {});
  // Parses a decrypted image in place and takes it over (a sealed model, core/sealed_file.h): the
  // bytes stay in locked anonymous memory and are wiped when the file is destroyed.
  static Result<std::unique_ptr<GgufFile>> FromSecureBuffer(SecureBuffer&& buffer,
                                                            const OpenOptions& opts = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t file_size() const;
  uint64_t data_offset() const;  // start of the tensor data section in the file
  // The whole file's bytes (for hashing before any pages are released).
  std::span<const uint8_t> content() const;
  // Whether the bytes are a decrypted sealed file, and whether they are locked in memory.
  bool decrypted() const;
  bool locked_in_memory() const;

  const std::vector<MetadataEntry>& metadata() const;
  const MetadataValue* Find(std::string_view key) const;  // nullptr if absent

  // Typed getters: NOT_FOUND when absent, INVALID_ARGUMENT (naming the key) on a type mismatch.
  // Integer getters accept any integer type whose value fits the requested one (OUT_OF_RANGE,
  // naming the key and value, when it does not fit).
  Result<std::string_view> GetString(std::string_view key) const;
  Result<uint32_t> GetU32(std::string_view key) const;
  Result<int64_t> GetI64(std::string_view key) const;
  Result<float> GetF32(std::string_view key) const;    // accepts f32/f64 (and integers)
  Result<bool> GetBool(std::string_view key) const;
  // Array getters: the element type must match (ints: any integer type whose values fit, else
  // OUT_OF_RANGE; floats: f32 or f64). Strings point into the mapping (valid while the file is).
  Result<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetF32Array(std::string_view key) const;
  Result<std::vector<int32_t>> GetI32Array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent
  // The tensors FindTensor has never returned, in file order: after a model's load, the ones it
  // does not use. llama.cpp refuses such a file ("wrong number of tensors"): a tensor nobody reads
  // is usually part of a variant the loader does not know (a bias, a norm), which would run
  // without it and give wrong answers, so the loaders refuse it too (RefuseUnusedTensors).
  std::vector<std::string_view> TensorsNeverLookedUp() const;

  // Drops the resident pages wholly inside [data, data + size) of the mapping (madvise
  // MADV_DONTNEED): for tensors the engine has copied into its own layout and will not read
  // again. Only resident memory changes: a later read faults the bytes back in from the file.
  // Returns the bytes released that no earlier call released (page-rounded inward); 0 for an
  // in-memory image (FromBytes) or a range not inside the mapping. A decrypted image's pages are
  // wiped and given back (they read as zeros afterwards: nothing can fault them back in).
  uint64_t ReleasePages(const void* data, uint64_t size) const;
  // What ReleasePages has released so far, each page once (a decrypted image: memory given back).
  uint64_t released_bytes() const;

 private:
  // The whole pages inside [data, data + size) as [first, last), empty ({0, 0}) when the range
  // is not inside the file's mapped or decrypted image.
  std::pair<uintptr_t, uintptr_t> PagesInside(const void* data, uint64_t size) const;
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vlmd::engine::gguf
