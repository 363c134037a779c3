#!/usr/bin/env bash
# Copies the parity fixtures the tests use from the team's shared folder (../shared/fixtures)
# into tests/fixtures, so that any clone runs every parity test without ../shared. Run it when a
# shared fixture changes or a family's tests start using a new one (name it here, in FIXTURES);
# the FixtureCopyTest suite then checks each copied file against the sha256 in golden.json.
# Usage: scripts/copy_fixtures.sh [SHARED_FIXTURES_DIR]
set -euo pipefail

# The folders the tests read (plus the fixtures README, which says what every file is).
FIXTURES=(tiny-gemma3 tiny-internvl tiny-llava tiny-llava16 tiny-smolvlm tiny-qwen2vl tiny-qwen25vl tiny-qwen3vl tokenizer)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=${1:-$root/../shared/fixtures}
dst=$root/tests/fixtures
if [[ ! -f "$src/README.md" ]]; then
  echo "copy_fixtures: no fixtures at $src" >&2
  exit 1
fi
mkdir -p "$dst"
cp "$src/README.md" "$dst/README.md"
for f in "${FIXTURES[@]}"; do
  rm -rf "${dst:?}/$f"
  cp -r "$src/$f" "$dst/$f"
done
chmod -R u+w "$dst"
echo "copy_fixtures: copied ${FIXTURES[*]} from $src ($(du -sh "$dst" | cut -f1))"
