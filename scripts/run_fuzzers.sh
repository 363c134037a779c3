#!/usr/bin/env bash
# Builds every libFuzzer target (clang, ASan+UBSan) in build-asan/ (shared with `make test-asan`)
# and runs each one for
# SECONDS (default 60) over a scratch copy of its seed corpus, so tests/fuzz/corpus stays as
# committed. Exits non-zero on the first crash, leak, timeout or sanitizer report; the crashing
# input is left in build-asan/artifacts/<target>/.
#   usage: scripts/run_fuzzers.sh [SECONDS] [TARGET...]
set -euo pipefail

seconds="${1:-60}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${root}/build-asan"
jobs="${VLMD_FUZZ_BUILD_JOBS:-2}"

bash "${root}/scripts/sanitizer_build.sh" build-asan address,undefined -DVLMD_BUILD_FUZZERS=ON
cmake --build "${build}" --target vlmd_fuzzers -j "${jobs}"

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  targets=()
  for src in "${root}"/tests/fuzz/*_fuzz.cpp; do
    targets+=("$(basename "${src}" .cpp)")
  done
fi

failed=0
for target in "${targets[@]}"; do
  bin="${build}/bin/${target}"
  [[ -x "${bin}" ]] || { echo "run_fuzzers: ${target}: not built" >&2; exit 1; }
  name="${target%_fuzz}"
  seeds="${root}/tests/fuzz/corpus/${name}"
  [[ -d "${seeds}" ]] || seeds="${root}/tests/fuzz/corpus/${name%%_*}"
  work="${build}/corpus/${target}"
  artifacts="${build}/artifacts/${target}/"
  rm -rf "${work}"
  mkdir -p "${work}" "${artifacts}"
  if [[ -d "${seeds}" ]]; then cp -r "${seeds}/." "${work}/"; fi
  echo "run_fuzzers: ${target} for ${seconds}s over $(ls "${work}" | wc -l) seeds"
  if ! "${bin}" -max_total_time="${seconds}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="${artifacts}" "${work}" \
      2>"${build}/${target}.log"; then
    echo "run_fuzzers: ${target} FAILED; see ${build}/${target}.log and ${artifacts}" >&2
    tail -n 40 "${build}/${target}.log" >&2
    failed=1
    break
  fi
  grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)" \
    "${build}/${target}.log" || true
done
exit "${failed}"
