#!/usr/bin/env bash
# Checks the one-way dependency direction of src/ (README "Layout"): every #include "..." of a
# module names only the modules below it, as its CMake DEPS say, and only serve/http includes
# cpp-httplib or Boost.Asio/Beast. The libraries link with PUBLIC deps, so a back-edge could still link; this catches
# it by the includes. Usage: check_layering.sh [source root]; exit 1 naming each violation.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root/src"

# module directory -> the include prefixes it may use (itself included).
declare -A allowed=(
  [core]="core"
  [engine/tensor]="core engine/tensor"
  [engine/image]="core engine/tensor engine/image"
  [engine/gguf]="core engine/tensor engine/gguf"
  [engine/kernels]="core engine/tensor engine/kernels hwy"  # hwy: Highway's own quoted includes
  [engine/ops]="core engine/tensor engine/kernels engine/ops"
  [engine/tokenizer]="core engine/tensor engine/gguf engine/tokenizer"
  [engine/synth]="core engine/tensor engine/gguf engine/synth"
  [engine/models]="core engine/tensor engine/gguf engine/kernels engine/ops engine/models"
  [engine/runtime]="core engine/tensor engine/gguf engine/kernels engine/ops engine/models engine/tokenizer engine/image engine/runtime"
  [serve/obs]="core serve/obs"
  [serve/api]="core serve/api"
  [serve/policy]="core serve/policy"
  [serve/redact]="core engine/tensor engine/image serve/redact"
  [serve/hosting]="core engine serve/api serve/obs serve/redact serve/hosting"
  [serve/config]="core engine serve/api serve/obs serve/policy serve/redact serve/hosting serve/config"
  [serve/http]="core engine serve"
)

# The module of a file: the longest table entry its folder lies in (kernels/x86 is kernels).
module_of() {
  local dir="$1" best=""
  for module in "${!allowed[@]}"; do
    if [[ "$dir" == "$module" || "$dir" == "$module"/* ]] && (( ${#module} > ${#best} )); then
      best="$module"
    fi
  done
  echo "$best"
}

violations=0
while IFS= read -r file; do
  module="$(module_of "${file%/*}")"
  if [[ -z "$module" ]]; then
    echo "layering: src/$file is in no module of the table (say where it sits)"
    violations=1
    continue
  fi
  while IFS= read -r inc; do
    ok=0
    for prefix in ${allowed[$module]}; do
      [[ "$inc" == "$prefix"/* ]] && ok=1 && break
    done
    if [[ $ok == 0 ]]; then
      echo "layering: src/$file includes \"$inc\" (src/$module may use: ${allowed[$module]})"
      violations=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
  if [[ "$module" != serve/http ]] && grep -q '#[[:space:]]*include[[:space:]]*<httplib\.h>' "$file"; then
    echo "layering: src/$file includes <httplib.h> (only src/serve/http may)"
    violations=1
  fi
  if [[ "$module" != serve/http ]] && grep -q '#[[:space:]]*include[[:space:]]*<boost/\(asio\|beast\)' "$file"; then
    echo "layering: src/$file includes Boost.Asio/Beast (only src/serve/http may)"
    violations=1
  fi
done < <(find . -mindepth 2 \( -name '*.h' -o -name '*.cpp' \) | sed 's|^\./||' | sort)
if [[ $violations == 0 ]]; then echo "layering: ok (${#allowed[@]} modules)"; fi
exit "$violations"
