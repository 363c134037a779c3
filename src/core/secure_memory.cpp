// SecureBuffer: anonymous, undumpable, locked-if-allowed memory wiped before unmapping.
#include "core/secure_memory.h"

#include <openssl/crypto.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>
#include <utility>

#include "core/disjoint_ranges.h"

namespace vlmd {

struct SecureBuffer::ReleasedPages {
  std::mutex mu;
  DisjointRanges ranges;
};

void WipeBytes(void* data, size_t bytes) {
  if (data != nullptr && bytes != 0) OPENSSL_cleanse(data, bytes);
}

Result<SecureBuffer> SecureBuffer::Allocate(size_t bytes) {
  SecureBuffer b;
  if (bytes == 0) return b;
  b.released_ = std::make_unique<ReleasedPages>();  // first: Reset needs it once data_ is set
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) return ResourceExhaustedError("secure buffer of " + std::to_string(bytes) + " bytes");
  const size_t mapped = (bytes + page - 1) / page * page;
  void* m = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return ResourceExhaustedError("cannot map " + std::to_string(bytes) + " bytes of memory for decrypted data");
  }
  b.data_ = static_cast<uint8_t*>(m);
  b.size_ = bytes;
  b.mapped_ = mapped;
#ifdef MADV_DONTDUMP
  (void)::madvise(m, mapped, MADV_DONTDUMP);  // best effort: core dumps must not hold plaintext
#endif
  b.locked_ = ::mlock(m, mapped) == 0;
  return b;
}

SecureBuffer::SecureBuffer() = default;
SecureBuffer::~SecureBuffer() { Reset(); }

SecureBuffer::SecureBuffer(SecureBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      locked_(std::exchange(other.locked_, false)),
      released_(std::move(other.released_)) {}

SecureBuffer& SecureBuffer::operator=(SecureBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    locked_ = std::exchange(other.locked_, false);
    released_ = std::move(other.released_);
  }
  return *this;
}

void SecureBuffer::Reset() {
  if (data_ == nullptr) return;
  const auto base = reinterpret_cast<uintptr_t>(data_);
  released_->ranges.ForEachGap(base, base + size_, [](uintptr_t first, uintptr_t last) {
    WipeBytes(reinterpret_cast<void*>(first), last - first);
  });
  released_.reset();
  if (locked_) ::munlock(data_, mapped_);
  ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
  locked_ = false;
}

size_t SecureBuffer::ReleaseRange(const void* p, size_t n) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(data_);
  if (data_ == nullptr || p == nullptr || n == 0 || begin < base || begin - base > size_ ||
      n > size_ - (begin - base)) {
    return 0;
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + n) / page * page;
  if (last <= first) return 0;
  std::vector<DisjointRanges::Range> claimed;  // the pages this call wipes and releases
  {
    std::lock_guard<std::mutex> lock(released_->mu);
    claimed = released_->ranges.Gaps(first, last);
    released_->ranges.Add(first, last);
  }
  size_t released = 0;
  for (const auto& [lo, hi] : claimed) {
    WipeBytes(reinterpret_cast<void*>(lo), hi - lo);
    if (locked_) ::munlock(reinterpret_cast<void*>(lo), hi - lo);
    // Wiped either way, so the final wipe may skip it; counted only when given back.
    if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0) released += hi - lo;
  }
  return released;
}

}  // namespace vlmd
