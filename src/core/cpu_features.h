// CPU feature detection, done once: x86-64 from CPUID + XGETBV + the Linux AMX permission
// request; aarch64 from the kernel's HWCAP bits (getauxval). A field of the other architecture
// stays false.
#pragma once

#include <string>

namespace vlmd {

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool bmi2 = false;
  bool avxvnni = false;   // AVX-VNNI: VEX-encoded 256-bit vpdpbusd
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512fp16 = false;
  bool amx_tile = false;   // CPUID says so AND the OS granted XTILEDATA permission
  bool amx_bf16 = false;
  bool amx_int8 = false;
  // aarch64 (Linux HWCAP names): Advanced SIMD, the SDOT/UDOT dot product, the int8 matrix
  // multiply (SMMLA/USDOT), BF16 (BFDOT/BFMMLA), half-precision arithmetic and SVE.
  bool asimd = false;
  bool asimddp = false;
  bool i8mm = false;
  bool bf16 = false;
  bool asimdhp = false;
  bool sve = false;
  std::string brand;       // e.g. "Intel(R) Xeon(R) ..."
  std::string vendor;      // x86 CPUID vendor: "GenuineIntel", "AuthenticAMD", ...; "" on Arm
  std::string ToString() const;  // "avx2 fma f16c avx512f ..."
};

// Detected once (thread-safe, first call does the work). AMX is reported only when the kernel
// granted the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM).
const CpuFeatures& GetCpuFeatures();

}  // namespace vlmd
