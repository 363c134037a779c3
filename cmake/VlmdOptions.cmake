# Build options (VLMD_ prefix) and the compiler flags they imply.
option(VLMD_BUILD_TESTS "Build the GoogleTest suites" ON)
option(VLMD_BUILD_TOOLS "Build the vlmd binaries (vlmd-run, vlmd-quantize, vlmd-bench, ...)" ON)
option(VLMD_BUILD_FUZZERS "Build libFuzzer targets (needs clang)" OFF)
# VLMD_ARCH: x86 or arm64, the kernel family compiled (kernels/x86/<isa> or kernels/arm64/<isa>).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(VLMD_ARCH arm64)
else()
  set(VLMD_ARCH x86)
endif()
# OFF: the engine alone (kernels, models, runtime, their tests), without the HTTP server, the
# tools and their libraries. aarch64 builds only the engine for now (what make test-arm64 runs
# under emulation): the tools' machine probes (tools/vlmd-bench) are x86 code, and the server has
# not been built or tested there.
if(VLMD_ARCH STREQUAL "arm64")
  set(VLMD_SERVER_DEFAULT OFF)
else()
  set(VLMD_SERVER_DEFAULT ON)
endif()
option(VLMD_BUILD_SERVER "Build the serving layer (src/serve), the vlmd server and the tools"
       ${VLMD_SERVER_DEFAULT})
if(VLMD_ARCH STREQUAL "arm64" AND NOT VLMD_BUILD_SERVER)
  message(STATUS "vlmd: aarch64 builds the engine and its tests only (no server or tools yet)")
endif()
option(VLMD_WERROR "Treat warnings as errors" OFF)
option(VLMD_NATIVE "Compile everything with -march=native (never for shipped binaries)" OFF)
set(VLMD_SANITIZE "" CACHE STRING "Sanitizers: address,undefined | thread | empty")

find_program(VLMD_CCACHE ccache)
if(VLMD_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${VLMD_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${VLMD_CCACHE})
endif()

add_compile_options(-Wall -Wextra -Wno-unused-parameter)
if(VLMD_WERROR)
  add_compile_options(-Werror)
endif()
if(VLMD_NATIVE)
  add_compile_options(-march=native)
elseif(VLMD_ARCH STREQUAL "arm64")
  # The shipped baseline: ARMv8.0-A with Advanced SIMD (every aarch64 CPU). Dot product and
  # wider extensions live only in per-ISA kernel files (VlmdKernels).
  add_compile_options(-march=armv8-a)
else()
  # The shipped baseline: x86-64-v2. Wider ISAs live only in per-ISA kernel files (VlmdKernels).
  add_compile_options(-march=x86-64-v2 -mtune=generic)
endif()
if(VLMD_ARCH STREQUAL "arm64")
  # GCC fuses a * b + c into one FMA in C++ by default wherever the target has FMA, which every
  # aarch64 CPU has and x86-64-v2 has not: without this, the scalar reference kernels would round
  # differently on the two architectures.
  add_compile_options(-ffp-contract=off)
endif()
if(VLMD_SANITIZE)
  add_compile_options(-fsanitize=${VLMD_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${VLMD_SANITIZE})
endif()
