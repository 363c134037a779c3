// ISA selection and table construction.
#include "engine/kernels/kernel_table.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include "core/cpu_features.h"

namespace vlmd::engine::kernels {
namespace {

// The ISAs whose kernels this build compiles: the x86 chain or the aarch64 one.
bool IsaAvailableOnThisArch(Isa isa) {
  if (isa == Isa::kRef) return true;
#if defined(__x86_64__)
  return isa >= Isa::kAvx2 && isa <= Isa::kAmx;
#elif defined(__aarch64__)
  return isa >= Isa::kNeon && isa <= Isa::kNeonI8mm;
#else
  return false;
#endif
}

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kRef: return "ref";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512vnni";
    case Isa::kAvx512Bf16: return "avx512bf16";
    case Isa::kAmx: return "amx";
    case Isa::kNeon: return "neon";
    case Isa::kNeonDot: return "neondot";
    case Isa::kNeonI8mm: return "neoni8mm";
  }
  return "unknown";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  for (int i = 0; i < kNumIsas; ++i) {
    if (IsaName(static_cast<Isa>(i)) == name) return static_cast<Isa>(i);
  }
  return std::nullopt;
}

bool IsaAvailable(Isa isa) {
  if (!IsaAvailableOnThisArch(isa)) return false;
  const CpuFeatures& f = GetCpuFeatures();
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (isa) {
    case Isa::kRef: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvxVnni: return avx2 && f.avxvnni;
    case Isa::kAvx512: return avx512;
    case Isa::kAvx512Vnni: return avx512 && f.avx512vnni;
    case Isa::kAvx512Bf16: return avx512 && f.avx512vnni && f.avx512bf16;
    case Isa::kAmx:
      return avx512 && f.avx512vnni && f.avx512bf16 && f.amx_tile && f.amx_bf16;
    case Isa::kNeon: return f.asimd;
    case Isa::kNeonDot: return f.asimd && f.asimddp;
    case Isa::kNeonI8mm: return f.asimd && f.asimddp && f.i8mm;
  }
  return false;
}

Isa BestAvailableIsa() {
  for (int i = kNumIsas - 1; i > 0; --i) {
    if (IsaAvailable(static_cast<Isa>(i))) return static_cast<Isa>(i);
  }
  return Isa::kRef;
}

Result<Isa> SelectIsa() {
  const char* forced = std::getenv("VLMD_FORCE_ISA");
  if (forced == nullptr || *forced == '\0') return BestAvailableIsa();
  auto isa = ParseIsa(forced);
  if (!isa) {
    return InvalidArgumentError(std::string("VLMD_FORCE_ISA=") + forced +
                                " is not one of ref, avx2, avxvnni, avx512, avx512vnni, "
                                "avx512bf16, amx, neon, neondot, neoni8mm");
  }
  if (!IsaAvailable(*isa)) {
    return UnimplementedError(std::string("VLMD_FORCE_ISA=") + forced +
                              ": this CPU does not support it");
  }
  return *isa;
}

namespace {

// Each table is the ref table, then the Highway kernels, then the fillers of its architecture's
// chain up to itself. Only this architecture's fillers are compiled in; a table of the other
// architecture is never available (IsaAvailable), so it is the ref table.
KernelTable Build(Isa isa) {
  KernelTable t;
  t.isa = isa;
  FillRefKernels(&t);
  if (!IsaAvailableOnThisArch(isa)) return t;
  if (isa != Isa::kRef) FillHwyKernels(&t);
#if defined(__x86_64__)
  const std::string& vendor = GetCpuFeatures().vendor;
  if (vendor == "AuthenticAMD" || vendor == "HygonGenuine") t.gemv_prefetch_blocks_q4 = 8;
  if (isa >= Isa::kAvx2) FillAvx2Kernels(&t);
  if (isa == Isa::kAvxVnni) FillAvxVnniKernels(&t);  // a side branch: see Isa
  if (isa >= Isa::kAvx512) FillAvx512Kernels(&t);
  if (isa >= Isa::kAvx512Vnni) FillAvx512VnniKernels(&t);
  if (isa >= Isa::kAvx512Bf16) FillAvx512Bf16Kernels(&t);
  if (isa >= Isa::kAmx) FillAmxKernels(&t);
#elif defined(__aarch64__)
  if (isa >= Isa::kNeon) FillNeonKernels(&t);
  if (isa >= Isa::kNeonDot) FillNeonDotKernels(&t);
  if (isa >= Isa::kNeonI8mm) FillNeonI8mmKernels(&t);
#endif
  return t;
}

}  // namespace

const KernelTable& GetKernelTable(Isa isa) {
  static std::once_flag once[kNumIsas];
  static KernelTable tables[kNumIsas];
  const int i = static_cast<int>(isa);
  std::call_once(once[i], [i] { tables[i] = Build(static_cast<Isa>(i)); });
  return tables[i];
}

}  // namespace vlmd::engine::kernels
