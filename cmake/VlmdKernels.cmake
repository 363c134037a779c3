# Per-ISA kernel translation units: each file under kernels/x86/<isa>/ (kernels/arm64/<isa>/ on
# aarch64) is compiled with exactly that ISA's flags and reached only through the KernelTable,
# chosen at run time from CPUID (the HWCAP bits on aarch64).
set(VLMD_ISA_FLAGS_avx2 -mavx2 -mfma -mf16c -mbmi2)
set(VLMD_ISA_FLAGS_avxvnni ${VLMD_ISA_FLAGS_avx2} -mavxvnni)
set(VLMD_ISA_FLAGS_avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -mbmi2)
set(VLMD_ISA_FLAGS_avx512vnni ${VLMD_ISA_FLAGS_avx512} -mavx512vnni)
set(VLMD_ISA_FLAGS_avx512bf16 ${VLMD_ISA_FLAGS_avx512vnni} -mavx512bf16)
set(VLMD_ISA_FLAGS_amx ${VLMD_ISA_FLAGS_avx512bf16} -mamx-tile -mamx-bf16 -mamx-int8)
# aarch64: neon is the baseline (no flags beyond it); neondot adds the signed int8 dot product
# (SDOT, ARMv8.2-A's optional FEAT_DotProd: Cortex-A55/A76 and later, Neoverse N1/V1/N2,
# Graviton 2-4, Ampere Altra, Apple M1 and later).
set(VLMD_ISA_FLAGS_neon "")
set(VLMD_ISA_FLAGS_neondot -march=armv8.2-a+dotprod)
# neoni8mm adds the int8 matrix multiply (SMMLA, FEAT_I8MM: Neoverse V1/V2/N2, Graviton 3/4,
# Apple M2 and later).
set(VLMD_ISA_FLAGS_neoni8mm -march=armv8.2-a+dotprod+i8mm)
set(VLMD_ISAS_x86 avx2 avxvnni avx512 avx512vnni avx512bf16 amx)
set(VLMD_ISAS_arm64 neon neondot neoni8mm)

# vlmd_isa_sources(<target> <isa> <files...>): adds files with the ISA's compile flags.
function(vlmd_isa_sources target isa)
  target_sources(${target} PRIVATE ${ARGN})
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "${VLMD_ISA_FLAGS_${isa}}")
endfunction()
