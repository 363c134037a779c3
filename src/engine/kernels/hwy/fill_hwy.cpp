// Fills the KernelTable slots implemented with Highway for t->isa: avx2 and avxvnni get the
// HWY_AVX2 code, avx512, avx512vnni, avx512bf16 and amx the HWY_AVX3 code, the neon tables the
// HWY_NEON code, ref nothing (see hwy/elementwise.cpp).
#include "engine/kernels/hwy/hwy_fill.h"
#include "hwy/highway.h"

// The targets must survive Highway's target policy under our baseline flags (-march=x86-64-v2
// makes SSE4 the static target, AVX2 and AVX3 are attainable above it; -march=armv8-a makes NEON
// the static target). If this fires, the fillers below would be missing at link time anyway;
// this says why.
#if defined(__x86_64__)
static_assert((HWY_TARGETS & HWY_AVX2) != 0 && (HWY_TARGETS & HWY_AVX3) != 0,
              "Highway does not compile the AVX2 and AVX3 targets under these flags");
#elif defined(__aarch64__)
static_assert((HWY_TARGETS & HWY_NEON) != 0,
              "Highway does not compile the NEON target under these flags");
#endif

namespace vlmd::engine::kernels {

void FillHwyKernels(KernelTable* t) {
  switch (t->isa) {
    case Isa::kRef:
      return;
#if defined(__x86_64__)
    case Isa::kAvx2:
    case Isa::kAvxVnni:
      FillHwyOpsAvx2(t);
      return;
    case Isa::kAvx512:
    case Isa::kAvx512Vnni:
    case Isa::kAvx512Bf16:
    case Isa::kAmx:
      FillHwyOpsAvx512(t);
      return;
#elif defined(__aarch64__)
    case Isa::kNeon:
    case Isa::kNeonDot:
    case Isa::kNeonI8mm:
      FillHwyOpsNeon(t);
      return;
#endif
    default:
      return;  // another architecture's ISA: never available here
  }
}

}  // namespace vlmd::engine::kernels
