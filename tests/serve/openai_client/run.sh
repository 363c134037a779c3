#!/usr/bin/env bash
# The official `openai` npm client against a live vlmd: installs the pinned package once into
# BUILD_DIR/openai_client (npm ci from package-lock.json), starts the server (with_vlmd.sh) and
# runs openai_client_test.mjs. Fails loudly when node or npm or the install is missing.
# Usage: run.sh BUILD_DIR
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
build_dir=$(cd "$1" && pwd)
work="$build_dir/openai_client"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "openai_client: FAIL: '$tool' not found (install Debian's nodejs and npm)" >&2
    exit 1
  fi
done

# Install when absent or when the lock file changed since the last install.
mkdir -p "$work"
if [[ ! -f "$work/node_modules/openai/package.json" ]] ||
   ! cmp -s "$here/package-lock.json" "$work/package-lock.json" ||
   ! cmp -s "$here/package.json" "$work/package.json"; then
  rm -rf "$work/node_modules"
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  echo "openai_client: npm ci into $work"
  if ! (cd "$work" && npm ci --no-audit --no-fund); then
    rm -rf "$work/node_modules" "$work/package-lock.json"
    echo "openai_client: FAIL: npm ci could not install the openai package (is the npm registry reachable?)" >&2
    exit 1
  fi
fi
# Node resolves `import 'openai'` from the script's folder, so the script runs beside node_modules.
cp "$here/openai_client_test.mjs" "$work/"
echo "openai_client: openai $(node -p "require('$work/node_modules/openai/package.json').version")"

cd "$root"
VLMD_IMAGE="$root/tests/fixtures/tiny-smolvlm/images/img-128x96.png" VLMD_MODEL_ID=text \
  "$here/with_vlmd.sh" "$build_dir" node "$work/openai_client_test.mjs"
