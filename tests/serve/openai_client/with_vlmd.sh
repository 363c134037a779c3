#!/usr/bin/env bash
# Starts BUILD_DIR/bin/vlmd on a free port with the tiny-smolvlm fixture (WITH_VLMD_DEMO=1: the
# demo model), waits for /ready, runs the given command with VLMD_URL set, then stops the server
# whatever happened.
# Usage (from anywhere): with_vlmd.sh BUILD_DIR COMMAND [ARGS...]; exit status: the command's.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR COMMAND [ARGS...]" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
fixtures="$root/tests/fixtures/tiny-smolvlm"
vlmd="$build_dir/bin/vlmd"
# WITH_VLMD_DEMO=1: no model arguments, so vlmd serves its generated demo model (make run).
model_args=(-m "$fixtures/text.gguf" --mmproj "$fixtures/mmproj.gguf")
if [[ "${WITH_VLMD_DEMO:-}" == 1 ]]; then model_args=(); fi
for f in "$vlmd" "${model_args[@]:1:1}" "${model_args[@]:3:1}"; do
  if [[ ! -e "$f" ]]; then
    echo "with_vlmd: missing $f" >&2
    exit 2
  fi
done

log=$(mktemp "${TMPDIR:-/tmp}/vlmd-test.XXXXXX.log")
"$vlmd" "${model_args[@]}" --port 0 -t "${VLMD_TEST_THREADS:-1}" >"$log" 2>&1 &
pid=$!
stop_server() {
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
}
trap stop_server EXIT
trap 'exit 130' INT TERM

fail() {
  echo "with_vlmd: $*" >&2
  echo "---- vlmd log ----" >&2
  cat "$log" >&2
  exit 1
}

# The port: from "vlmd listening on http://127.0.0.1:PORT".
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*vlmd listening on http://[^:]*:\([0-9][0-9]*\).*|\1|p' "$log" | head -n 1)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || fail "vlmd exited before listening"
  sleep 0.1
done
[[ -n "$port" ]] || fail "no 'vlmd listening on' line after 10 s"
url="http://127.0.0.1:$port"

# /ready answers 503 while the model loads, 200 after.
ready=0
for _ in $(seq 600); do
  kill -0 "$pid" 2>/dev/null || fail "vlmd exited while loading the model"
  if [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/ready" || true) == 200 ]]; then
    ready=1
    break
  fi
  sleep 0.1
done
[[ $ready == 1 ]] || fail "$url/ready not 200 after 60 s"

status=0
VLMD_URL="$url" "$@" || status=$?
if [[ $status != 0 ]]; then
  echo "with_vlmd: '$*' exited $status" >&2
  echo "---- vlmd log (tail) ----" >&2
  tail -n 40 "$log" >&2
fi
kill -0 "$pid" 2>/dev/null || { echo "with_vlmd: vlmd died during the test" >&2; tail -n 40 "$log" >&2; status=1; }
exit "$status"
