#!/usr/bin/env bash
# `make run` until the HTTP server lands: generate the random-weight demo model once, then show
# what vlmd-run reads from it. Usage: scripts/run_demo.sh BUILD_DIR
set -euo pipefail
build="${1:-build}"
demo_dir="${VLMD_DEMO_DIR:-$HOME/.cache/vlmd/demo}"
if [ ! -f "$demo_dir/text.gguf" ] || [ ! -f "$demo_dir/mmproj.gguf" ]; then
  echo "run: generating the demo model (random weights, not a trained model) into $demo_dir"
  mkdir -p "$demo_dir"
  "$build/bin/vlmd-synth" --preset demo --out "$demo_dir"
fi
"$build/bin/vlmd-run" --info "$demo_dir/text.gguf"
echo "run: the demo model has random weights; the HTTP server (vlmd) is not built yet."
