// Memory for secrets: decrypted model weights and keys. Neither may reach a disk: a SecureBuffer is
// anonymous memory (never file-backed), excluded from core dumps (MADV_DONTDUMP), locked against
// swapping where RLIMIT_MEMLOCK allows it (mlock), and overwritten before it is returned to the
// kernel. A SecretKey wipes its bytes when it goes away.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"

namespace vlmd {

// Overwrites `bytes` in a way the compiler cannot elide (OPENSSL_cleanse).
void WipeBytes(void* data, size_t bytes);

class SecureBuffer {
 public:
  SecureBuffer();
  // `bytes` of zeroed anonymous memory; RESOURCE_EXHAUSTED when it cannot be mapped.
  static Result<SecureBuffer> Allocate(size_t bytes);
  ~SecureBuffer();
  SecureBuffer(SecureBuffer&& other) noexcept;
  SecureBuffer& operator=(SecureBuffer&& other) noexcept;
  SecureBuffer(const SecureBuffer&) = delete;
  SecureBuffer& operator=(const SecureBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Whether mlock succeeded: the pages cannot be swapped out. False where RLIMIT_MEMLOCK is
  // smaller than the buffer (the usual container default); the memory is still anonymous and
  // excluded from core dumps, but a swap device could receive it.
  bool locked() const { return locked_; }

  // Wipes the whole pages inside [p, p + n) and gives them back to the kernel (MADV_DONTNEED;
  // they read as zeros afterwards). For weights the engine has copied into its own layout.
  // Returns the bytes released that no earlier call released (a page is wiped and released
  // once), 0 when the range is not inside the buffer. Calls may run concurrently with each
  // other, not with a move or the destruction.
  size_t ReleaseRange(const void* p, size_t n);

 private:
  struct ReleasedPages;  // the ranges ReleaseRange gave back, and their lock
  void Reset();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // size_ rounded up to whole pages
  bool locked_ = false;
  // Kept so that the final wipe skips them: writing a released page would fault it back in,
  // and wiping a large model's released image would map all of it again just before the unmap.
  std::unique_ptr<ReleasedPages> released_;
};

// A symmetric key (SM4 is 128 bits), wiped on destruction.
struct SecretKey {
  static constexpr size_t kBytes = 16;
  std::array<uint8_t, kBytes> bytes{};
  SecretKey() = default;
  SecretKey(const SecretKey&) = default;
  SecretKey& operator=(const SecretKey&) = default;
  ~SecretKey() { WipeBytes(bytes.data(), bytes.size()); }
};

}  // namespace vlmd
