// VLMD_FORCE_ISA parsing and validation in SelectIsa, and the ISA name round trip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::kernels {
namespace {

// Sets VLMD_FORCE_ISA for the scope of one check and restores the previous value.
class ScopedForceIsa {
 public:
  explicit ScopedForceIsa(const char* value) {
    if (const char* old = std::getenv("VLMD_FORCE_ISA")) old_ = old, had_ = true;
    if (value) {
      setenv("VLMD_FORCE_ISA", value, 1);
    } else {
      unsetenv("VLMD_FORCE_ISA");
    }
  }
  ~ScopedForceIsa() {
    if (had_) {
      setenv("VLMD_FORCE_ISA", old_.c_str(), 1);
    } else {
      unsetenv("VLMD_FORCE_ISA");
    }
  }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(IsaSelect, NamesRoundTrip) {
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    ASSERT_TRUE(ParseIsa(IsaName(isa)).has_value());
    EXPECT_EQ(*ParseIsa(IsaName(isa)), isa);
  }
  EXPECT_FALSE(ParseIsa("AVX2").has_value());  // exact, lower-case names only
  EXPECT_FALSE(ParseIsa("").has_value());
  EXPECT_FALSE(ParseIsa("sse4").has_value());
}

TEST(IsaSelect, UnsetOrEmptyPicksBest) {
  for (const char* v : {static_cast<const char*>(nullptr), ""}) {
    ScopedForceIsa force(v);
    Result<Isa> isa = SelectIsa();
    ASSERT_TRUE(isa.ok()) << isa.status().ToString();
    EXPECT_EQ(*isa, BestAvailableIsa());
  }
  EXPECT_TRUE(IsaAvailable(Isa::kRef));
}

TEST(IsaSelect, ForcedIsaIsHonouredWhenAvailable) {
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa want = static_cast<Isa>(i);
    const std::string name(IsaName(want));
    ScopedForceIsa force(name.c_str());
    Result<Isa> isa = SelectIsa();
    if (IsaAvailable(want)) {
      ASSERT_TRUE(isa.ok()) << name << ": " << isa.status().ToString();
      EXPECT_EQ(*isa, want);
    } else {
      ASSERT_FALSE(isa.ok()) << name;
      EXPECT_EQ(isa.status().code(), StatusCode::kUnimplemented) << isa.status().ToString();
    }
  }
}

// A build compiles one architecture's kernels: the other one's ISAs are never available, so
// forcing one is UNIMPLEMENTED (above) and its table holds only the scalar kernels.
TEST(IsaSelect, OnlyThisArchitecturesIsasAreAvailable) {
#if defined(__x86_64__)
  const Isa foreign[] = {Isa::kNeon, Isa::kNeonDot, Isa::kNeonI8mm};
#elif defined(__aarch64__)
  const Isa foreign[] = {Isa::kAvx2,       Isa::kAvxVnni,   Isa::kAvx512,
                         Isa::kAvx512Vnni, Isa::kAvx512Bf16, Isa::kAmx};
#else
  const Isa foreign[] = {Isa::kAvx2, Isa::kNeon};
#endif
  for (Isa isa : foreign) {
    EXPECT_FALSE(IsaAvailable(isa)) << IsaName(isa);
    EXPECT_EQ(GetKernelTable(isa).rms_norm, GetKernelTable(Isa::kRef).rms_norm) << IsaName(isa);
    EXPECT_EQ(GetKernelTable(isa).packed_matmul, nullptr) << IsaName(isa);
  }
#if defined(__aarch64__)
  EXPECT_TRUE(IsaAvailable(Isa::kNeon)) << "Advanced SIMD is part of every ARMv8-A CPU";
#endif
}

// The AVX-VNNI table is the AVX2 one with its own packed products; it is a side branch of the
// x86 chain: the AVX-512 tables (Skylake-SP has no AVX-VNNI) do not inherit its matmul.
TEST(IsaSelect, AvxVnniIsTheAvx2TableWithItsOwnProductsAndNotInherited) {
  const KernelTable& avx2 = GetKernelTable(Isa::kAvx2);
  const KernelTable& vnni = GetKernelTable(Isa::kAvxVnni);
  if (!IsaAvailable(Isa::kAvxVnni)) {
    if (IsaAvailable(Isa::kAvx512)) {
      EXPECT_EQ(GetKernelTable(Isa::kAvx512).packed_matmul, avx2.packed_matmul);
    }
    GTEST_SKIP() << "no AVX-VNNI on this CPU";
  }
  EXPECT_NE(vnni.packed_matmul, nullptr);
  EXPECT_NE(vnni.packed_matmul, avx2.packed_matmul);
  EXPECT_EQ(vnni.rms_norm, avx2.rms_norm);
  EXPECT_EQ(vnni.softmax, avx2.softmax);
  for (Isa above : {Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16, Isa::kAmx}) {
    EXPECT_NE(GetKernelTable(above).packed_matmul, vnni.packed_matmul) << IsaName(above);
  }
  if (IsaAvailable(Isa::kAvx512)) {
    EXPECT_EQ(GetKernelTable(Isa::kAvx512).packed_matmul, avx2.packed_matmul);
  }
}

// VLMD_EXPECT_ISA (set by make test-arm64 for each emulated CPU) names the table this CPU must
// pick: a feature bit read wrongly, or an emulator without an extension, would otherwise drop
// that table's kernels from every test without a failure.
TEST(IsaSelect, PicksTheExpectedTableWhereOneIsNamed) {
  const char* expect = std::getenv("VLMD_EXPECT_ISA");
  if (expect == nullptr || *expect == '\0') GTEST_SKIP() << "VLMD_EXPECT_ISA not set";
  EXPECT_EQ(IsaName(BestAvailableIsa()), std::string(expect));
}

TEST(IsaSelect, UnknownNameIsInvalidArgument) {
  for (const char* v : {"avx1024", "AVX2", "ref "}) {
    ScopedForceIsa force(v);
    Result<Isa> isa = SelectIsa();
    ASSERT_FALSE(isa.ok()) << v;
    EXPECT_EQ(isa.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(isa.status().message().find(v), std::string::npos) << isa.status().message();
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels
