# Per-ISA kernel translation units: each file under kernels/x86/<isa>/ is compiled with exactly
# that ISA's flags and reached only through the KernelTable, chosen at run time from CPUID.
set(VLMD_ISA_FLAGS_avx2 -mavx2 -mfma -mf16c -mbmi2)
set(VLMD_ISA_FLAGS_avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -mbmi2)
set(VLMD_ISA_FLAGS_avx512vnni ${VLMD_ISA_FLAGS_avx512} -mavx512vnni -mavx512bf16)
set(VLMD_ISA_FLAGS_amx ${VLMD_ISA_FLAGS_avx512vnni} -mamx-tile -mamx-bf16 -mamx-int8)

# vlmd_isa_sources(<target> <isa> <files...>): adds files with the ISA's compile flags.
function(vlmd_isa_sources target isa)
  target_sources(${target} PRIVATE ${ARGN})
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "${VLMD_ISA_FLAGS_${isa}}")
endfunction()
