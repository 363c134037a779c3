// Memory for large, long-lived, read-mostly buffers: the packed weights a decode step streams
// through once per token. They are carved from 2 MiB-aligned chunks that ask the kernel for
// transparent huge pages (madvise; Linux's default THP mode), so that reading ~100 MB of weights
// costs ~500x fewer TLB misses than with 4 KiB pages. In a VM every TLB miss is a two-level
// page walk; on the 2-vCPU machine of bench/RESULTS.md this made the decode GEMVs ~5% faster.
// Where the kernel gives no huge pages the chunks work as ordinary memory.
//
// Small buffers share a chunk; a chunk is returned to the OS when its last buffer is freed, so a
// model that is unloaded (hot swap) gives its memory back. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace vlmd {

// Where a buffer goes: shared chunks (the default; a chunk's space comes back only when all its
// buffers are freed), or a mapping of its own (returned to the OS when it is freed: for large
// buffers freed long before the weights around them, e.g. copies a loader drops once packed).
// Buffers of 16 MiB and more always get their own mapping.
enum class LargePlacement { kShared, kOwnMapping };

// `bytes` (0 allowed) aligned to 64 bytes, uninitialized; nullptr when out of memory.
void* AllocateLarge(size_t bytes, LargePlacement placement = LargePlacement::kShared);
// Frees what AllocateLarge returned (nullptr is a no-op).
void FreeLarge(void* p);

struct LargeDeleter {
  void operator()(void* p) const { FreeLarge(p); }
};
template <typename T>
using LargeArray = std::unique_ptr<T, LargeDeleter>;

// A standard allocator over AllocateLarge, for containers of model weights (the f32 norms and
// biases the loaders convert): they then share the chunks, and so the protected mode, of the
// packed weights. Throws std::bad_alloc when out of memory, as std::allocator does.
template <typename T, LargePlacement P = LargePlacement::kShared>
struct LargeAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = LargeAllocator<U, P>;
  };
  LargeAllocator() = default;
  template <typename U>
  LargeAllocator(const LargeAllocator<U, P>&) noexcept {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    void* p = AllocateLarge(n * sizeof(T), P);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { FreeLarge(p); }
  template <typename U>
  bool operator==(const LargeAllocator<U, P>&) const noexcept { return true; }
};

// Bytes currently mapped for large buffers (all chunks, used or not), for tests and metrics.
size_t LargeAllocMappedBytes();

// Protected mode, for weights that came from a sealed model file (core/sealed_file.h): from the
// call on, for the rest of the process, every chunk (those mapped already and new ones) is kept
// out of core dumps (MADV_DONTDUMP), locked against swapping where RLIMIT_MEMLOCK allows
// (mlock), and overwritten with zeros before it is unmapped or its pages handed back. One-way:
// a process that held protected weights keeps protecting. Thread-safe.
void ProtectLargeAllocations();
// Whether every chunk mapped now is locked (vacuously true when none is; chunks are locked only
// in protected mode).
bool LargeAllocAllLocked();

}  // namespace vlmd
