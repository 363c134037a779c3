// CPU feature detection (CPUID + XGETBV + the Linux AMX permission request), done once.
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
  std::string brand;       // e.g. "Intel(R) Xeon(R) ..."
  std::string ToString() const;  // "avx2 fma f16c avx512f ..."
};

// Detected once (thread-safe, first call does the work). AMX is reported only when the kernel
// granted the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM).
const CpuFeatures& GetCpuFeatures();

}  // namespace vlmd
