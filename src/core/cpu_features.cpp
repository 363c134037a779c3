// Feature detection. x86-64: CPUID, with OS support for AVX / AVX-512 state checked with XGETBV
// (a CPU can have AVX-512 while the OS has not enabled its register state, and then it must not
// be used). aarch64: the HWCAP bits the kernel reports only for what it also supports.
#include "core/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>

#include <fstream>
#endif

#include <cstdint>
#include <cstring>

namespace vlmd {
namespace {

#if defined(__x86_64__)

struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs Cpuid(uint32_t leaf, uint32_t sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

uint64_t Xgetbv() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool Bit(uint32_t v, int bit) { return (v >> bit) & 1u; }

// Linux requires a per-process request before AMX tile data may be used (kernel >= 5.16).
bool RequestAmxPermission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuFeatures Detect() {
  CpuFeatures f;
  const Regs l0 = Cpuid(0);
  const uint32_t max_leaf = l0.a;
  char vendor[13] = {};  // EBX, EDX, ECX
  std::memcpy(vendor, &l0.b, 4);
  std::memcpy(vendor + 4, &l0.d, 4);
  std::memcpy(vendor + 8, &l0.c, 4);
  f.vendor = vendor;
  const Regs l1 = Cpuid(1);
  f.sse42 = Bit(l1.c, 20);
  f.fma = Bit(l1.c, 12);
  f.f16c = Bit(l1.c, 29);
  const bool osxsave = Bit(l1.c, 27);
  const bool cpu_avx = Bit(l1.c, 28);
  uint64_t xcr0 = osxsave ? Xgetbv() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;                // XMM + YMM state
  const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;           // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG + XTILEDATA
  f.avx = cpu_avx && os_avx;
  f.fma = f.fma && f.avx;
  f.f16c = f.f16c && f.avx;
  if (max_leaf >= 7) {
    const Regs l7 = Cpuid(7, 0);
    f.avx2 = Bit(l7.b, 5) && f.avx;
    f.bmi2 = Bit(l7.b, 8);
    f.avx512f = Bit(l7.b, 16) && os_avx512;
    f.avx512dq = Bit(l7.b, 17) && os_avx512;
    f.avx512bw = Bit(l7.b, 30) && os_avx512;
    f.avx512vl = Bit(l7.b, 31) && os_avx512;
    f.avx512vnni = Bit(l7.c, 11) && os_avx512;
    f.avx512fp16 = Bit(l7.d, 23) && os_avx512;
    const bool amx_tile = Bit(l7.d, 24), amx_int8 = Bit(l7.d, 25), amx_bf16 = Bit(l7.d, 22);
    const Regs l71 = Cpuid(7, 1);
    f.avxvnni = Bit(l71.a, 4) && f.avx;
    f.avx512bf16 = Bit(l71.a, 5) && os_avx512;
    if (amx_tile && os_amx && RequestAmxPermission()) {
      f.amx_tile = true;
      f.amx_int8 = amx_int8;
      f.amx_bf16 = amx_bf16;
    }
  }
  char brand[49] = {};
  if (Cpuid(0x80000000).a >= 0x80000004) {
    for (uint32_t i = 0; i < 3; ++i) {
      Regs r = Cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
  }
  f.brand = brand;
  while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  return f;
}

#elif defined(__aarch64__)

// The Linux uapi bit numbers (asm/hwcap.h), spelled out: older sysroots lack the newer names.
constexpr unsigned long kHwcapAsimd = 1ul << 1, kHwcapAsimdhp = 1ul << 10,
                        kHwcapAsimddp = 1ul << 20, kHwcapSve = 1ul << 22;
constexpr unsigned long kHwcap2I8mm = 1ul << 13, kHwcap2Bf16 = 1ul << 14;

CpuFeatures Detect() {
  CpuFeatures f;
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  f.asimd = (hw & kHwcapAsimd) != 0;
  f.asimdhp = (hw & kHwcapAsimdhp) != 0;
  f.asimddp = (hw & kHwcapAsimddp) != 0;
  f.sve = (hw & kHwcapSve) != 0;
  f.i8mm = (hw2 & kHwcap2I8mm) != 0;
  f.bf16 = (hw2 & kHwcap2Bf16) != 0;
  // No brand string on Arm: the first core's implementer and part numbers (MIDR) say which.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, implementer, part;
  while (std::getline(cpuinfo, line) && part.empty()) {
    const auto value = [&line] { return line.substr(line.find(':') + 1); };
    if (line.rfind("CPU implementer", 0) == 0) implementer = value();
    if (line.rfind("CPU part", 0) == 0) part = value();
  }
  f.brand = "aarch64";
  if (!part.empty()) f.brand += " (implementer" + implementer + ", part" + part + ")";
  return f;
}

#else
CpuFeatures Detect() { return {}; }  // no SIMD kernels for this architecture: the scalar table
#endif

}  // namespace

std::string CpuFeatures::ToString() const {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(sse42, "sse4.2"); add(avx, "avx"); add(avx2, "avx2"); add(fma, "fma"); add(f16c, "f16c");
  add(bmi2, "bmi2"); add(avxvnni, "avxvnni"); add(avx512f, "avx512f"); add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq"); add(avx512vnni, "avx512vnni"); add(avx512bf16, "avx512bf16");
  add(avx512fp16, "avx512fp16"); add(amx_tile, "amx-tile"); add(amx_bf16, "amx-bf16");
  add(amx_int8, "amx-int8"); add(asimd, "asimd"); add(asimdhp, "asimdhp");
  add(asimddp, "asimddp"); add(i8mm, "i8mm"); add(bf16, "bf16"); add(sve, "sve");
  return s;
}

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace vlmd
