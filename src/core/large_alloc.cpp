// Chunked allocator of large_alloc.h. Buffers of at least kDedicatedBytes get a mapping of their
// own; smaller ones are bump-allocated from the current shared chunk. Each chunk counts its live
// buffers and is unmapped when the count drops to zero (the current chunk is then rewound and
// kept for reuse instead). Freed space inside a chunk with live buffers is not reused: the
// buffers are long-lived weights, allocated at load and freed together with their model.
#include "core/large_alloc.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>

namespace vlmd {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunkBytes = size_t{32} << 20;
constexpr size_t kDedicatedBytes = kChunkBytes / 2;
constexpr size_t kAlign = 64;

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

struct Chunk {
  size_t size = 0;  // mapped bytes, from the (2 MiB-aligned) base
  size_t used = 0;  // bump offset
  size_t live = 0;  // buffers not yet freed
  bool locked = false;
  bool shared = false;  // bump-allocated buffers (else one buffer, the whole chunk)
};

struct State {
  std::mutex mu;
  std::map<uintptr_t, Chunk> chunks;  // by base address
  uintptr_t current = 0;              // shared chunk being filled (0: none)
  size_t mapped = 0;
  bool protect = false;               // ProtectLargeAllocations was called
  // The size of each live buffer in a shared chunk: protected mode wipes a buffer when it is
  // freed, not only its chunk with the chunk's last buffer (a hot-swapped sealed model's norms
  // stayed in a chunk its successor's buffers kept alive).
  std::unordered_map<uintptr_t, size_t> shared_sizes;
};

// Protected mode's treatment of one chunk: out of core dumps, locked where allowed.
void Protect(uintptr_t base, Chunk* c) {
  (void)::madvise(reinterpret_cast<void*>(base), c->size, MADV_DONTDUMP);
  c->locked = ::mlock(reinterpret_cast<void*>(base), c->size) == 0;
}

// Protected mode: zeros over what a chunk's buffers held (up to its bump offset), before its
// pages go back to the kernel (which would otherwise leave them in RAM until reused).
void Wipe(const State& s, uintptr_t base, const Chunk& c) {
  // explicit_bzero: stores the compiler may not drop as dead before munmap.
  if (s.protect) explicit_bzero(reinterpret_cast<void*>(base), c.used);
}

State& GlobalState() {
  static State* s = new State();  // never destroyed: buffers may outlive static destructors
  return *s;
}

// Maps `size` bytes (a multiple of 2 MiB) at a 2 MiB-aligned address and asks for huge pages.
bool MapChunk(size_t size, Chunk* c, uintptr_t* base) {
  const size_t span = size + kHugePage;  // room to align the start
  void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(m);
  *base = RoundUp(raw, kHugePage);
  // Give back the slack before and after the aligned range.
  if (*base > raw) ::munmap(m, *base - raw);
  if (raw + span > *base + size) {
    ::munmap(reinterpret_cast<void*>(*base + size), raw + span - (*base + size));
  }
  // Advice only: without THP the memory is ordinary pages, which is still correct.
  (void)::madvise(reinterpret_cast<void*>(*base), size, MADV_HUGEPAGE);
  c->size = size;
  return true;
}

}  // namespace

void* AllocateLarge(size_t bytes, LargePlacement placement) {
  const size_t need = RoundUp(bytes == 0 ? 1 : bytes, kAlign);
  if (need < bytes) return nullptr;  // overflow
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (need >= kDedicatedBytes || placement == LargePlacement::kOwnMapping) {
    if (need > SIZE_MAX - 2 * kHugePage) return nullptr;
    Chunk c;
    uintptr_t base = 0;
    if (!MapChunk(RoundUp(need, kHugePage), &c, &base)) return nullptr;
    if (s.protect) Protect(base, &c);
    c.used = need;
    c.live = 1;
    s.mapped += c.size;
    s.chunks.emplace(base, c);
    return reinterpret_cast<void*>(base);
  }
  if (s.current != 0) {
    Chunk& c = s.chunks.at(s.current);
    if (c.size - c.used >= need) {
      void* p = reinterpret_cast<void*>(s.current + c.used);
      c.used += need;
      ++c.live;
      s.shared_sizes[reinterpret_cast<uintptr_t>(p)] = need;
      return p;
    }
    // Full (an empty current chunk is rewound, and every shared buffer fits an empty chunk):
    // it is unmapped with its last buffer.
    s.current = 0;
  }
  Chunk c;
  uintptr_t base = 0;
  if (!MapChunk(kChunkBytes, &c, &base)) return nullptr;
  if (s.protect) Protect(base, &c);
  c.used = need;
  c.live = 1;
  c.shared = true;
  s.mapped += c.size;
  s.chunks.emplace(base, c);
  s.current = base;
  s.shared_sizes[base] = need;
  return reinterpret_cast<void*>(base);
}

void FreeLarge(void* p) {
  if (p == nullptr) return;
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mu);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  auto it = s.chunks.upper_bound(addr);
  if (it == s.chunks.begin()) return;  // not ours (a caller bug); nothing sane to do
  it = std::prev(it);
  Chunk& c = it->second;
  if (addr >= it->first + c.size || c.live == 0) return;
  if (c.shared) {
    const auto sized = s.shared_sizes.find(addr);
    if (sized != s.shared_sizes.end()) {
      if (s.protect) explicit_bzero(p, sized->second);
      // Its space is not handed out again before the chunk empties: while other buffers keep
      // the chunk, the whole huge pages inside this one go back to the OS now (a float matrix's
      // column-scaled try that a column failed, a loader's copy). Not the partial ones:
      // splitting a huge page would cost the buffers that share it their TLB reach. Locked
      // pages (protected mode) refuse; they were wiped above.
      const uintptr_t first = RoundUp(addr, kHugePage);
      const uintptr_t last = (addr + sized->second) / kHugePage * kHugePage;
      if (c.live > 1 && last > first) {
        (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
      }
      s.shared_sizes.erase(sized);
    }
  }
  if (--c.live > 0) return;
  Wipe(s, it->first, c);
  if (it->first == s.current) {
    // Keep the current chunk, rewound, and hand its pages back (they refault as zeros; locked
    // pages stay, already wiped).
    c.used = 0;
    (void)::madvise(reinterpret_cast<void*>(it->first), c.size, MADV_DONTNEED);
    return;
  }
  ::munmap(reinterpret_cast<void*>(it->first), c.size);
  s.mapped -= c.size;
  s.chunks.erase(it);
}

void ProtectLargeAllocations() {
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.protect) return;
  s.protect = true;
  for (auto& [base, c] : s.chunks) Protect(base, &c);
}

bool LargeAllocAllLocked() {
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& [base, c] : s.chunks) {
    if (!c.locked) return false;
  }
  return true;
}

size_t LargeAllocMappedBytes() {
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.mapped;
}

}  // namespace vlmd
