#!/usr/bin/env bash
# What a newcomer's `make run` does, checked end to end: builds only the server target
# (`make server`), starts it with no model (the generated demo model, in a fresh cache folder) on a
# free port (tests/serve/openai_client/with_vlmd.sh), and runs the README's curl examples against
# it. Exit 0 only if every answer is right.
# Usage: scripts/smoke_run.sh  (from any folder; builds into BUILD, default build/)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The README's examples against $VLMD_URL: an image by multipart and by base64, a streamed chat,
# the model list, the metrics.
if [[ "${1:-}" == "--checks" ]]; then
  url=$VLMD_URL
  fail() { echo "smoke_run: FAIL: $*" >&2; exit 1; }
  png="$root/tests/fixtures/tiny-smolvlm/images/img-128x96.png"
  out=$(curl -sf "$url/v1/vlm/invoke" -F "image=@$png" -F 'request={"prompt":"What is shown?","max_tokens":8}') ||
    fail "multipart invoke"
  grep -q '"text"' <<<"$out" || fail "multipart invoke answered: $out"
  # The body from stdin, as the README sends it: a photo's base64 is over the 128 KiB a single
  # command-line argument may be.
  out=$({ printf '{"prompt":"Describe it.","max_tokens":8,"image_base64":"'; base64 -w0 "$png"; printf '"}'; } |
    curl -sf "$url/v1/vlm/invoke" -H 'Content-Type: application/json' --data-binary @-) ||
    fail "base64 invoke"
  grep -q '"model_hash"' <<<"$out" || fail "base64 invoke answered: $out"
  out=$(curl -sf "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hello!"}],"max_tokens":4,"stream":true}') || fail "chat stream"
  grep -q '^data: \[DONE\]' <<<"$out" || fail "chat stream answered: $out"
  # Whole bodies first: `curl | grep -q` fails under pipefail when grep stops reading early.
  out=$(curl -sf "$url/v1/models") || fail "/v1/models"
  grep -q 'vlmd-demo' <<<"$out" || fail "/v1/models does not list the demo model: $out"
  out=$(curl -sf "$url/metrics") || fail "/metrics"
  grep -q '^vlm_' <<<"$out" || fail "/metrics has no vlm_ series"
  exit 0
fi

build=${BUILD:-build}
cd "$root"
start=$(date +%s)
make server BUILD="$build"
echo "smoke_run: make server took $(( $(date +%s) - start )) s"
cache=$(mktemp -d "${TMPDIR:-/tmp}/vlmd-smoke.XXXXXX")
trap 'rm -rf "$cache"' EXIT
XDG_CACHE_HOME="$cache" WITH_VLMD_DEMO=1 \
  bash "$root/tests/serve/openai_client/with_vlmd.sh" "$build" bash "$root/scripts/smoke_run.sh" --checks
echo "smoke_run: OK (demo model answered the README's examples; $(( $(date +%s) - start )) s in all)"
