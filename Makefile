# Entry points of the README: `make` builds everything into build/bin, `make run` installs what is
# missing, builds and starts vlmd, `make test` installs, builds and runs every test with ctest.
# The build itself is CMake + Ninja (see CMakeLists.txt); this file only sequences it.

BUILD       ?= build
JOBS        ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
# ccache keys on paths relative to the checkout, so clones in other folders (CI) share the cache.
export CCACHE_BASEDIR := $(CURDIR)

.PHONY: all deps configure run test test-asan fuzz bench clean

all: deps configure
	cmake --build $(BUILD) -j$(JOBS)

deps:
	@bash scripts/setup.sh

configure: deps
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

test: all
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# Unit and kernel suites under AddressSanitizer + UndefinedBehaviorSanitizer (no tools/benches).
test-asan: deps
	@test -f build-asan/build.ninja || cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DVLMD_SANITIZE=address,undefined -DVLMD_BUILD_TOOLS=OFF -DVLMD_BUILD_BENCH=OFF
	cmake --build build-asan -j$(JOBS)
	ctest --test-dir build-asan --output-on-failure -j$(JOBS)

# Every libFuzzer target for FUZZ_SECONDS each, over a copy of its seed corpus.
fuzz: deps
	bash scripts/run_fuzzers.sh $(FUZZ_SECONDS)

# Until the HTTP server lands (issue: server), `make run` generates the demo model once and shows
# what vlmd-run reads from it.
run: all
	bash scripts/run_demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
