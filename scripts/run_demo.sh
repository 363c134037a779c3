#!/usr/bin/env bash
# `make run` until the HTTP server lands: generate the random-weight demo model once, show what
# vlmd-run reads from it, and generate a few tokens with it. Usage: scripts/run_demo.sh BUILD_DIR
set -euo pipefail
build="${1:-build}"
demo_dir="${VLMD_DEMO_DIR:-$HOME/.cache/vlmd/demo}"
if [ ! -f "$demo_dir/text.gguf" ] || [ ! -f "$demo_dir/mmproj.gguf" ]; then
  echo "run: generating the demo model (random weights, not a trained model) into $demo_dir"
  mkdir -p "$demo_dir"
  "$build/bin/vlmd-synth" --preset demo --out "$demo_dir"
fi
info="$("$build/bin/vlmd-run" --info "$demo_dir/text.gguf")"
printf '%s\n' "$info" | sed -n '1,40p'
echo "... ($(printf '%s\n' "$info" | wc -l) lines of JSON in all)"
echo "run: generating 32 tokens with the demo model (random weights: expect gibberish):"
"$build/bin/vlmd-run" -m "$demo_dir/text.gguf" -p "Describe the picture." -n 32
echo "run: the HTTP server (vlmd) is not built yet; this is what make run shows until it is."
