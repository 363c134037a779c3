#include "core/large_alloc.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace vlmd {
namespace {

TEST(LargeAlloc, AlignedWritableAndDistinct) {
  std::vector<void*> ps;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{100000},
                       size_t{3} << 20}) {
    void* p = AllocateLarge(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    std::memset(p, 0xAB, bytes);
    ps.push_back(p);
  }
  // No two buffers overlap: each still holds its own fill after all were written.
  for (size_t i = 0; i < ps.size(); ++i) std::memset(ps[i], static_cast<int>(i), 1);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(*static_cast<uint8_t*>(ps[i]), i);
  for (void* p : ps) FreeLarge(p);
  FreeLarge(nullptr);
}

TEST(LargeAlloc, DedicatedBuffersAreUnmappedWhenFreed) {
  const size_t before = LargeAllocMappedBytes();
  void* p = AllocateLarge(size_t{40} << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(LargeAllocMappedBytes(), before + (size_t{40} << 20));
  static_cast<uint8_t*>(p)[(size_t{40} << 20) - 1] = 1;  // the whole size is usable
  FreeLarge(p);
  EXPECT_EQ(LargeAllocMappedBytes(), before);
}

TEST(LargeAlloc, FullChunksAreUnmappedWithTheirLastBuffer) {
  const size_t before = LargeAllocMappedBytes();
  // ~100 MB in 1 MB buffers: several shared chunks.
  std::vector<void*> ps;
  for (int i = 0; i < 100; ++i) {
    ps.push_back(AllocateLarge(size_t{1} << 20));
    ASSERT_NE(ps.back(), nullptr);
    static_cast<uint8_t*>(ps.back())[0] = static_cast<uint8_t>(i);
  }
  EXPECT_GE(LargeAllocMappedBytes(), size_t{100} << 20);  // (a current chunk may predate them)
  for (int i = 0; i < 100; ++i) EXPECT_EQ(static_cast<uint8_t*>(ps[i])[0], i);
  for (void* p : ps) FreeLarge(p);
  // At most the current (rewound) chunk stays mapped.
  EXPECT_LE(LargeAllocMappedBytes(), before + (size_t{36} << 20));
}

// A shared buffer freed while its chunk lives on (its space is not reused before the chunk
// empties) gives the whole huge pages inside it back at once: a float matrix's column-scaled try
// that failed stayed resident for the model's lifetime.
TEST(LargeAlloc, AFreedSharedBufferGivesBackTheHugePagesInsideIt) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t bytes = size_t{12} << 20;  // shared (under 16 MiB), spans whole huge pages
  void* p = AllocateLarge(bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5A, bytes);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  void* keep = AllocateLarge(64);  // right after it in the same chunk, which it keeps alive
  ASSERT_EQ(reinterpret_cast<uintptr_t>(keep), addr + bytes);
  if (LargeAllocAllLocked()) {  // protected mode from an earlier test of this process: locked
    FreeLarge(p);               // pages are kept (wiped), by design
    FreeLarge(keep);
    GTEST_SKIP() << "the chunks are locked (protected mode earlier in this process)";
  }
  const uintptr_t first = (addr + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  const size_t span = size_t{8} << 20;  // whole huge pages certainly inside [p, p + 12 MiB)
  ASSERT_LE(first + span, addr + bytes);
  auto resident = [&] {
    std::vector<unsigned char> in(span / page);
    EXPECT_EQ(::mincore(reinterpret_cast<void*>(first), span, in.data()), 0);
    size_t n = 0;
    for (unsigned char v : in) n += v & 1;
    return n;
  };
  EXPECT_EQ(resident(), span / page);
  FreeLarge(p);
  EXPECT_EQ(resident(), 0u);
  FreeLarge(keep);
}

// Two threads allocating, filling, checking and freeing buffers of mixed sizes at once (shared
// chunks and dedicated mappings): no buffer is handed out twice, none is corrupted, and the
// mapped total returns to at most one chunk above where it started.
TEST(LargeAlloc, ConcurrentAllocateAndFree) {
  const size_t before = LargeAllocMappedBytes();
  auto worker = [](uint8_t tag, bool* ok) {
    std::vector<std::pair<uint8_t*, size_t>> live;
    uint32_t x = tag * 2654435761u;
    for (int i = 0; i < 400; ++i) {
      x = x * 1664525u + 1013904223u;
      const size_t bytes = (x >> 8) % 3 == 0 ? (size_t{17} << 20) : 1 + (x >> 8) % (256 << 10);
      auto* p = static_cast<uint8_t*>(AllocateLarge(bytes));
      if (p == nullptr) {
        *ok = false;
        return;
      }
      std::memset(p, tag, bytes);
      live.emplace_back(p, bytes);
      if (live.size() > 6) {  // free the oldest after checking it is still ours
        auto [q, n] = live.front();
        if (q[0] != tag || q[n / 2] != tag || q[n - 1] != tag) *ok = false;
        FreeLarge(q);
        live.erase(live.begin());
      }
    }
    for (auto [q, n] : live) {
      if (q[0] != tag || q[n - 1] != tag) *ok = false;
      FreeLarge(q);
    }
  };
  bool ok1 = true, ok2 = true;
  std::thread t1(worker, uint8_t{0x5A}, &ok1), t2(worker, uint8_t{0xA5}, &ok2);
  t1.join();
  t2.join();
  EXPECT_TRUE(ok1);
  EXPECT_TRUE(ok2);
  EXPECT_LE(LargeAllocMappedBytes(), before + (size_t{32} << 20));
}

TEST(LargeAlloc, ImpossibleSizeFails) {
  EXPECT_EQ(AllocateLarge(SIZE_MAX - 10), nullptr);
  EXPECT_EQ(AllocateLarge(SIZE_MAX / 2), nullptr);  // mmap refuses
}


TEST(LargeAlloc, AllocatorBacksStandardContainers) {
  std::vector<float, LargeAllocator<float>> v;
  for (int i = 0; i < 10000; ++i) v.push_back(static_cast<float>(i));  // regrows, frees old
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u);
  const std::vector<float, LargeAllocator<float>> copy = v;
  ASSERT_EQ(copy.size(), 10000u);
  EXPECT_EQ(copy[9999], 9999.0f);
  EXPECT_GT(LargeAllocMappedBytes(), 0u);
  // A buffer placed in a mapping of its own gives its memory back when freed, even among
  // shared buffers that live on (a loader's copy dropped once packed).
  void* neighbour = AllocateLarge(4096);
  const size_t mapped = LargeAllocMappedBytes();
  {
    std::vector<float, LargeAllocator<float, LargePlacement::kOwnMapping>> folded(size_t{1} << 20, 1.0f);
    EXPECT_GE(LargeAllocMappedBytes(), mapped + (size_t{4} << 20));
  }
  EXPECT_EQ(LargeAllocMappedBytes(), mapped);
  FreeLarge(neighbour);
  LargeAllocator<float> alloc;
  EXPECT_THROW(static_cast<void>(alloc.allocate(SIZE_MAX / 2)), std::bad_alloc);  // overflows
  EXPECT_THROW(static_cast<void>(alloc.allocate(SIZE_MAX / 8)), std::bad_alloc);  // mmap refuses
}

// The VmFlags of the mapping holding `p` (from /proc/self/smaps), e.g. "rd wr mr mw me dd lo".
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < 17) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8) + " ";
  }
  return "";
}

// Whether this platform shows MADV_DONTDUMP and mlock in smaps at all, probed on a page of our
// own with the raw calls: qemu-user (the aarch64 suite) accepts madvise without passing it on,
// and the sanitizers' mlock interceptor returns success without locking. Where a probe shows
// the flag, the test below requires it of large_alloc's chunks.
struct PlatformFlags {
  bool dontdump_shows = false;
  bool mlock_shows = false;
};
PlatformFlags ProbePlatformFlags() {
  PlatformFlags out;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return out;
  if (madvise(p, page, MADV_DONTDUMP) == 0) out.dontdump_shows = VmFlagsOf(p).find(" dd ") != std::string::npos;
  if (mlock(p, page) == 0) out.mlock_shows = VmFlagsOf(p).find(" lo ") != std::string::npos;
  munmap(p, page);
  return out;
}

// Last in this file: protected mode is one-way for the process (the tests above ran without it).
TEST(LargeAlloc, ProtectedModeKeepsWeightsOutOfDumpsLocksAndWipesThem) {
  void* before = AllocateLarge(4096);  // mapped before protection: protected too
  ASSERT_NE(before, nullptr);
  std::memset(before, 0xAB, 4096);
  ProtectLargeAllocations();
  void* dedicated = AllocateLarge(size_t{20} << 20);
  ASSERT_NE(dedicated, nullptr);
  // Locked where the process may lock (CAP_IPC_LOCK or RLIMIT_MEMLOCK), and then said so.
  const PlatformFlags platform = ProbePlatformFlags();
  std::printf("platform shows MADV_DONTDUMP: %d, mlock: %d\n", platform.dontdump_shows, platform.mlock_shows);
  const bool locked = LargeAllocAllLocked();
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  if (lim.rlim_cur == RLIM_INFINITY) {
    EXPECT_TRUE(locked);
  }
  // The loaders' f32 copies of norms and biases (engine/models F32Weights) use LargeAllocator,
  // so they sit in protected chunks too.
  std::vector<float, LargeAllocator<float>> norm(768, 1.0f);
  for (void* p : {before, dedicated, static_cast<void*>(norm.data())}) {
    const std::string flags = VmFlagsOf(p);
    if (platform.dontdump_shows) {
      EXPECT_NE(flags.find(" dd "), std::string::npos) << flags;
    }
    if (platform.mlock_shows) {
      EXPECT_EQ(flags.find(" lo ") != std::string::npos, locked) << flags;
    }
  }
  FreeLarge(dedicated);
  // The shared chunk's last buffer freed: rewound and wiped, so the next buffer of that chunk
  // (the same address) holds zeros, locked pages included (MADV_DONTNEED cannot drop those).
  FreeLarge(before);
  auto* again = static_cast<uint8_t*>(AllocateLarge(4096));
  ASSERT_NE(again, nullptr);
  if (static_cast<void*>(again) == before) {
    size_t nonzero = 0;
    for (size_t i = 0; i < 4096; ++i) nonzero += again[i] != 0;
    EXPECT_EQ(nonzero, 0u);
  }
  FreeLarge(again);
  // A buffer freed while others of its chunk live on (a hot-swapped model's norms beside its
  // successor's): wiped at once, not left until the chunk's last buffer goes. (The chunk stays
  // mapped, so its bytes can be read here.)
  auto* old_weights = static_cast<uint8_t*>(AllocateLarge(4096));
  auto* successor = static_cast<uint8_t*>(AllocateLarge(4096));
  ASSERT_NE(old_weights, nullptr);
  ASSERT_NE(successor, nullptr);
  std::memset(old_weights, 0xCD, 4096);
  std::memset(successor, 0xEF, 4096);
  FreeLarge(old_weights);
  size_t left = 0;
  for (size_t i = 0; i < 4096; ++i) left += old_weights[i] != 0;
  EXPECT_EQ(left, 0u) << "a freed buffer's bytes stayed in its chunk";
  EXPECT_EQ(successor[0], 0xEF);
  FreeLarge(successor);
}

}  // namespace
}  // namespace vlmd
