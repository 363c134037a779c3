#!/usr/bin/env bash
# Configures (once) a clang build with sanitizers, shared by the sanitizer test targets and the
# fuzzers so that CI compiles the engine once per sanitizer, not once per purpose.
#   usage: scripts/sanitizer_build.sh DIR SANITIZERS [extra cmake args...]
#   e.g.   scripts/sanitizer_build.sh build-asan address,undefined -DVLMD_BUILD_FUZZERS=ON
# Release optimization without debug info: sanitizer reports still name functions (frame
# pointers are kept), and 2-core CI machines compile much faster without -g.
set -euo pipefail
dir="$1"
sanitizers="$2"
shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -f "${root}/${dir}/build.ninja" ]]; then exit 0; fi
CC=clang CXX=clang++ cmake -S "${root}" -B "${root}/${dir}" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DVLMD_SANITIZE="${sanitizers}" \
  -DVLMD_BUILD_TOOLS=OFF -DVLMD_BUILD_BENCH=OFF "$@" >/dev/null
