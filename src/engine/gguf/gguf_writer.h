// Builds GGUF v3 files (little-endian): metadata in insertion order, tensors validated on add and
// laid out at `alignment`-aligned offsets. Used by tools (quantize) and by tests that need
// synthetic models; the output is readable by GgufFile and by llama.cpp.
//
// Thread safety: none; build a writer on one thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::gguf {

class GgufWriter {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr size_t kMaxTensorName = 63;  // llama.cpp's GGML_MAX_NAME (64) minus the NUL

  GgufWriter() = default;
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Metadata setters. A new key is appended; setting an existing key replaces its value in place
  // (the key keeps its position). "general.alignment" is owned by SetAlignment: setting it with
  // SetU32 (or SetValue with a u32) routes there; any other type, or a value that is not a
  // non-zero power of two, is a programmer error (VLMD_CHECK).
  void SetU8(std::string_view key, uint8_t v);
  void SetI8(std::string_view key, int8_t v);
  void SetU16(std::string_view key, uint16_t v);
  void SetI16(std::string_view key, int16_t v);
  void SetU32(std::string_view key, uint32_t v);
  void SetI32(std::string_view key, int32_t v);
  void SetU64(std::string_view key, uint64_t v);
  void SetI64(std::string_view key, int64_t v);
  void SetF32(std::string_view key, float v);
  void SetF64(std::string_view key, double v);
  void SetBool(std::string_view key, bool v);
  void SetString(std::string_view key, std::string_view v);
  void SetStringArray(std::string_view key, std::span<const std::string> v);
  void SetStringArray(std::string_view key, std::span<const std::string_view> v);
  void SetI32Array(std::string_view key, std::span<const int32_t> v);
  void SetF32Array(std::string_view key, std::span<const float> v);
  // Copies any value read by GgufFile (scalars, strings, arrays of any element type), e.g. to
  // carry a model's metadata over into a re-quantized file.
  void SetValue(std::string_view key, const MetadataValue& v);

  // Alignment of the data section and of every tensor offset (default 32). Also written as
  // "general.alignment" (u32). INVALID_ARGUMENT unless a non-zero power of two.
  Status SetAlignment(uint32_t alignment);
  uint32_t alignment() const { return alignment_; }

  // Adds a tensor (ne in ggml order: ne[0] is the row length; 1 to 4 dims, each >= 0) whose bytes
  // are copied now. INVALID_ARGUMENT (naming the tensor) on a duplicate or empty name, a name
  // longer than kMaxTensorName, a bad rank, ne[0] not a multiple of the type's block size, an
  // element-count overflow, or data.size() != the size implied by type and shape.
  Status AddTensor(std::string_view name, DType type, std::span<const int64_t> ne,
                   std::span<const uint8_t> data);
  // Same checks, but borrows `data`: the caller keeps it alive and unchanged until the last
  // WriteFile/WriteBytes call (lets a large model go to disk without a second copy).
  Status AddTensorView(std::string_view name, DType type, std::span<const int64_t> ne,
                       std::span<const uint8_t> data);

  // Writes the file to `path` + ".tmp", then renames it over `path`, so readers never see a
  // partial file. UNAVAILABLE (with errno text) on any I/O error; the temporary is removed.
  Status WriteFile(const std::string& path) const;
  // The whole file in memory (tests, small tools).
  std::vector<uint8_t> WriteBytes() const;
  // Size of the file WriteBytes/WriteFile produce.
  uint64_t FileSize() const;

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // u32 value type + payload, exactly as in the file
  };
  struct Tensor {
    std::string name;
    DType type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
    std::vector<uint8_t> owned;      // AddTensor: the copy
    std::span<const uint8_t> view;   // AddTensorView: the caller's bytes
    std::span<const uint8_t> bytes() const { return owned.empty() ? view : owned; }
  };

  void Put(std::string_view key, std::vector<uint8_t> encoded);
  Status ValidateTensor(std::string_view name, DType type, std::span<const int64_t> ne,
                        uint64_t data_size, uint64_t* nbytes) const;
  // Header (magic .. tensor infos) plus padding up to the data section.
  std::vector<uint8_t> Header() const;
  uint64_t Padded(uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t alignment_ = kDefaultAlignment;
  std::vector<Kv> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace vlmd::engine::gguf
