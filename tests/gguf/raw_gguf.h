// Test helper: assembles GGUF bytes field by field, so hostile-input tests can write exactly the
// corruption they test (the real writer refuses to produce invalid files).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace vlmd::testing {

class RawGguf {
 public:
  RawGguf& Bytes(std::string_view s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& U8(uint8_t v) { return Le(v); }
  RawGguf& U32(uint32_t v) { return Le(v); }
  RawGguf& U64(uint64_t v) { return Le(v); }
  RawGguf& Str(std::string_view s) { return U64(s.size()).Bytes(s); }
  // magic, version, n_tensors, n_kv.
  RawGguf& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return Bytes("GGUF").U32(version).U64(n_tensors).U64(n_kv);
  }
  // One tensor info: name, dims (ggml order), type id, offset.
  RawGguf& TensorInfo(std::string_view name, std::vector<uint64_t> ne, uint32_t type,
                      uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) U64(n);
    return U32(type).U64(offset);
  }
  RawGguf& PadTo(size_t alignment) {
    while (b_.size() % alignment != 0) b_.push_back(0);
    return *this;
  }
  RawGguf& Zeros(size_t n) {
    b_.insert(b_.end(), n, 0);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  template <typename T>
  RawGguf& Le(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    for (uint8_t c : tmp) b_.push_back(c);
    return *this;
  }
  std::vector<uint8_t> b_;
};

}  // namespace vlmd::testing
