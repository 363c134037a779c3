#!/usr/bin/env bash
# What a newcomer's `make run` does, checked end to end: builds only the server target
# (`make server`), starts it with no model (the generated demo model, in a fresh cache folder) on a
# free port, and runs the README's curl examples against it. Exit 0 only if every answer is right.
# Usage: scripts/smoke_run.sh  (from any folder; builds into BUILD, default build/)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-build}
cd "$root"
start=$(date +%s)
make server BUILD="$build"
echo "smoke_run: make server took $(( $(date +%s) - start )) s"

work=$(mktemp -d "${TMPDIR:-/tmp}/vlmd-smoke.XXXXXX")
log="$work/vlmd.log"
XDG_CACHE_HOME="$work/cache" "$build/bin/vlmd" --port 0 -t 1 >"$log" 2>&1 &
pid=$!
cleanup() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "smoke_run: FAIL: $*" >&2
  echo "---- vlmd log ----" >&2
  cat "$log" >&2
  exit 1
}

port=""
for _ in $(seq 300); do
  port=$(sed -n 's|.*vlmd listening on http://[^:]*:\([0-9][0-9]*\).*|\1|p' "$log" | head -n 1)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || fail "vlmd exited before listening"
  sleep 0.1
done
[[ -n "$port" ]] || fail "no 'vlmd listening on' line after 30 s"
url="http://127.0.0.1:$port"
for _ in $(seq 600); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/ready" || true) == 200 ]] && break
  kill -0 "$pid" 2>/dev/null || fail "vlmd exited while loading the demo model"
  sleep 0.1
done

# The README's examples: an image by multipart and by base64, a streamed chat, the metrics.
png="$root/tests/fixtures/tiny-smolvlm/images/img-128x96.png"
out=$(curl -sf "$url/v1/vlm/invoke" -F "image=@$png" -F 'request={"prompt":"What is shown?","max_tokens":8}') ||
  fail "multipart invoke"
grep -q '"text"' <<<"$out" || fail "multipart invoke answered: $out"
out=$(curl -sf "$url/v1/vlm/invoke" -H 'Content-Type: application/json' \
  -d "{\"prompt\":\"Describe it.\",\"max_tokens\":8,\"image_base64\":\"$(base64 -w0 "$png")\"}") ||
  fail "base64 invoke"
grep -q '"model_hash"' <<<"$out" || fail "base64 invoke answered: $out"
out=$(curl -sf "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello!"}],"max_tokens":4,"stream":true}') || fail "chat stream"
grep -q '^data: \[DONE\]' <<<"$out" || fail "chat stream answered: $out"
curl -sf "$url/v1/models" | grep -q 'vlmd-demo' || fail "/v1/models does not list the demo model"
curl -sf "$url/metrics" | grep -q '^vlm_' || fail "/metrics has no vlm_ series"
echo "smoke_run: OK (demo model answered the README's examples; $(( $(date +%s) - start )) s in all)"
