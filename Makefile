# Entry points of the README: `make` builds everything into build/bin, `make run` installs what is
# missing, builds and starts vlmd, `make test` installs, builds and runs every test with ctest.
# The build itself is CMake + Ninja (see CMakeLists.txt); this file only sequences it.

BUILD       ?= build
JOBS        ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
# ccache keys on paths relative to the checkout, so clones in other folders (CI) share the cache.
export CCACHE_BASEDIR := $(CURDIR)

.PHONY: all deps configure server run test test-avx2 test-asan test-tsan test-arm64 fuzz clean

all: deps configure
	cmake --build $(BUILD) -j$(JOBS)

deps:
	@bash scripts/setup.sh

configure: deps
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

test: all
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# Every suite but the server's again on the AVX2 table (VLMD_FORCE_ISA): on a CI machine with
# AVX-512 the engine's AVX2 paths (the flash attention, the fast GELU, the int8 products) then
# also run end to end, not only in the kernel suite (which tests every table). ~15 s of tests.
test-avx2: all
	@if grep -qw avx2 /proc/cpuinfo; then \
	  VLMD_FORCE_ISA=avx2 ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -LE serve; \
	else echo "test-avx2: this CPU has no AVX2; skipped"; fi

# The engine cross-compiled for aarch64 (Debian's g++-aarch64-linux-gnu, the :arm64 libraries)
# and its suites (kernels, models, vision, runtime, units; not the HTTP server) run under
# qemu-user: all of them on QEMU_CPU=max (every extension: the neon, neondot and neoni8mm tables
# are all tested), then the kernel suite on a Cortex-A72 (no dot product: the HWCAP detection picks neon).
# Speed under emulation means nothing.
ARM64_BUILD ?= build-arm64
test-arm64: deps
	bash scripts/setup_arm64.sh
	@test -f $(ARM64_BUILD)/build.ninja || cmake -S . -B $(ARM64_BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
	  -DVLMD_BUILD_SERVER=OFF
	cmake --build $(ARM64_BUILD) -j$(JOBS)
	QEMU_CPU=max VLMD_EXPECT_ISA=neoni8mm \
	  ctest --test-dir $(ARM64_BUILD) --output-on-failure -j$(JOBS)
	QEMU_CPU=cortex-a72 VLMD_EXPECT_ISA=neon \
	  ctest --test-dir $(ARM64_BUILD) --output-on-failure -j$(JOBS) -L kernel

# Every suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang). The same build holds
# the libFuzzer targets, so CI compiles the engine once for both.
test-asan: deps
	bash scripts/sanitizer_build.sh build-asan address,undefined -DVLMD_BUILD_FUZZERS=ON
	cmake --build build-asan -j$(JOBS)
	ctest --test-dir build-asan --output-on-failure -j$(JOBS)

# The server's suites (scheduler, HTTP, concurrency), the runtime and the thread pool under
# ThreadSanitizer.
test-tsan: deps
	bash scripts/sanitizer_build.sh build-tsan thread
	cmake --build build-tsan --target vlmd_serve_tests vlmd_runtime_tests vlmd_core_tests -j$(JOBS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/serve/tsan.supp" \
	  ctest --test-dir build-tsan --output-on-failure -L "serve|unit" -R "Server|Batched|VlmEngine|Metrics|Job|ThreadPool|LargeAlloc" -j1

# Every libFuzzer target for FUZZ_SECONDS each, over a copy of its seed corpus (build-asan).
fuzz: deps
	bash scripts/run_fuzzers.sh $(FUZZ_SECONDS)

# Builds, then starts the server on 127.0.0.1:8080. Without VLMD_ARGS (e.g. VLMD_ARGS="-m
# text.gguf --mmproj mmproj.gguf") it serves the random-weight demo model, generated once into
# ~/.cache/vlmd/demo.
VLMD_ARGS ?=
run: server
	$(BUILD)/bin/vlmd $(VLMD_ARGS)

# Only the server and the libraries it links (no tests, tools or benchmarks): what `make run` needs.
server: deps configure
	cmake --build $(BUILD) --target vlmd -j$(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-tsan $(ARM64_BUILD)
