#!/usr/bin/env bash
# The command-line tools given arguments that once aborted them (an uncaught exception, exit
# 134) or did the wrong thing with exit 0: each must now exit with one clear error and write
# nothing. A directory where a file belongs (std::ifstream's buffer threw from inside
# istreambuf_iterator), a thread count beyond what can be started, vlmd-bench lengths that made
# negative speeds, vlmd-quantize's two files swapped, vlmd-encrypt --inspect with files to seal,
# --save-redacted over its input or with another extension than .png; vlmd signalled during a
# model load that does not end.
# Usage: hostile_args_cli.sh BIN_DIR FIXTURES_DIR
set -u
bin=$1
fx=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error PATTERN CMD...: a non-zero exit that is not a signal (>= 128), and stderr
# matching PATTERN.
expect_error() {
  local pattern=$1
  shift
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "exit $rc for $*: $err"
  printf '%s' "$err" | grep -q -- "$pattern" || fail "'$err' lacks '$pattern' ($*)"
}

mkdir "$dir/folder"
m=(-m "$fx/tiny-llava/text.gguf")
expect_error "is a directory" "$bin/vlmd-run" "${m[@]}" --mmproj "$fx/tiny-llava/mmproj.gguf" --image "$dir/folder" -p hi -n 1
expect_error "is a directory" "$bin/vlmd-run" "${m[@]}" -f "$dir/folder" -n 1
expect_error "is a directory" "$bin/vlmd-run" "${m[@]}" --tokenize-file "$dir/folder"
expect_error "is a directory" "$bin/vlmd-run" --redact faces --image "$dir/folder"
expect_error "not in range" "$bin/vlmd-run" "${m[@]}" -p hi -n 1 -t 100000
expect_error "not in range" "$bin/vlmd-quantize" "$fx/tiny-llava/text.gguf" "$dir/q.gguf" q8_0 -t 100000
expect_error "not in range" "$bin/vlmd-encrypt" "$fx/tiny-llava/text.gguf" "$dir/s.sealed" -t 100000
expect_error "not in range" "$bin/vlmd-bench" model "${m[@]}" -p -1
expect_error "not in range" "$bin/vlmd-bench" model "${m[@]}" -n 1

img="$dir/photo.png"
cp "$(ls "$fx"/tiny-llava/images/*.png | head -1)" "$img" || fail "no fixture image"
before=$(sha256sum "$img")
expect_error "is the input image" "$bin/vlmd-run" --redact faces --image "$img" --save-redacted "$img"
expect_error "name it \*.png" "$bin/vlmd-run" --redact faces --image "$img" --save-redacted "$dir/covered.jpg"
[ "$(sha256sum "$img")" = "$before" ] || fail "the input image changed"
[ -e "$dir/covered.jpg" ] && fail "a .jpg was written"
"$bin/vlmd-run" --redact faces --image "$img" --save-redacted "$dir/covered.PNG" >/dev/null || fail "--save-redacted .PNG"
[ -s "$dir/covered.PNG" ] || fail "no covered.PNG"

expect_error "is a vision encoder" "$bin/vlmd-quantize" --text q8_0 --vision f16 -m "$fx/tiny-llava/mmproj.gguf" \
  --mmproj "$fx/tiny-llava/text.gguf" -o "$dir/pair"
expect_error "is not a vision encoder" "$bin/vlmd-quantize" --text q8_0 --vision f16 -m "$fx/tiny-llava/text.gguf" \
  --mmproj "$fx/tiny-smolvlm/text.gguf" -o "$dir/pair"
[ -e "$dir/pair/text.gguf" ] && fail "a swapped pair wrote text.gguf"

expect_error "without INPUT and OUTPUT" "$bin/vlmd-encrypt" --inspect "$fx/tiny-llava/text.gguf" "$fx/tiny-llava/text.gguf" "$dir/s.sealed"
[ -e "$dir/s.sealed" ] && fail "--inspect with files sealed one"
( unset VLMD_MODEL_KEY; expect_error "give it with --key-file, --key-command or VLMD_MODEL_KEY" \
  "$bin/vlmd-encrypt" "$fx/tiny-llava/text.gguf" "$dir/s.sealed" )  || exit 1
# vlmd whose model never finishes loading (a FIFO nobody writes: a stalled network volume) ends
# at SIGTERM, with 128 + 15; the signal waited for the load before.
if [ -x "$bin/vlmd" ]; then
  mkfifo "$dir/stalled.gguf"
  "$bin/vlmd" -m "$dir/stalled.gguf" --port 0 -t 1 >"$dir/vlmd.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do grep -q "loading" "$dir/vlmd.log" && break; sleep 0.1; done
  kill -TERM "$pid"
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
    fail "vlmd did not exit at SIGTERM during its model load"
  fi
  wait "$pid"
  rc=$?
  [ "$rc" -eq 143 ] || fail "vlmd exited $rc at SIGTERM during its load: $(cat "$dir/vlmd.log")"
fi
echo "hostile CLI arguments: ok"
