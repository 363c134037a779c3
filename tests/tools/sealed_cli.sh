#!/usr/bin/env bash
# vlmd-encrypt and vlmd-run on a sealed model, end to end: seal the tiny-smolvlm fixture, inspect
# it without a key, generate the golden greedy tokens with the key (file, variable and command),
# and get one clear error line (exit 2) for no key, a wrong key and an altered file.
# Usage: sealed_cli.sh BIN_DIR FIXTURES_DIR
set -u
bin=$1
fx=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

key=00112233445566778899aabbccddeeff
printf '%s\n' "$key" > "$dir/model.key"
"$bin/vlmd-encrypt" "$fx/tiny-smolvlm/text.gguf" "$dir/text.sealed" --key-file "$dir/model.key" \
  --key-id edge-1 -t 2 >/dev/null || fail "vlmd-encrypt"
cmp -s "$fx/tiny-smolvlm/text.gguf" "$dir/text.sealed" && fail "the sealed file equals the plain one"
# A file that is not a GGUF (here the sealed one) is not sealed: it would be refused at every start.
"$bin/vlmd-encrypt" "$dir/text.sealed" "$dir/twice.sealed" --key-file "$dir/model.key" 2>/dev/null
test $? -eq 2 || fail "sealing a sealed file should fail with exit 2"
test -e "$dir/twice.sealed" && fail "sealing a sealed file wrote an output"
# No key given: the error names vlmd-encrypt's own options.
err=$(env -u VLMD_MODEL_KEY "$bin/vlmd-encrypt" "$fx/tiny-smolvlm/text.gguf" "$dir/nokey.sealed" 2>&1 >/dev/null)
test $? -eq 2 || fail "sealing without a key should fail with exit 2"
printf '%s' "$err" | grep -q 'give it with --key-file, --key-command or VLMD_MODEL_KEY$' || fail "no key: $err"

inspect=$("$bin/vlmd-encrypt" --inspect "$dir/text.sealed") || fail "--inspect"
want_sha=$(sha256sum "$fx/tiny-smolvlm/text.gguf" | cut -d' ' -f1)
printf '%s' "$inspect" | grep -q "\"plaintext_sha256\": \"$want_sha\"" || fail "inspect sha: $inspect"
printf '%s' "$inspect" | grep -q '"key_id": "edge-1"' || fail "inspect key id: $inspect"

unset VLMD_MODEL_KEY
info=$("$bin/vlmd-run" --info "$dir/text.sealed") || fail "--info without a key"
printf '%s' "$info" | grep -q '"key_id": "edge-1"' || fail "info: $info"
printf '%s' "$info" | grep -q 'general.architecture' && fail "info without a key shows the model"
info=$("$bin/vlmd-run" --info "$dir/text.sealed" --model-key-file "$dir/model.key") || fail "--info with the key"
printf '%s' "$info" | grep -q '"general.architecture": "llama"' || fail "info with key: $info"

# Exact precision, as in vlmd_run_generate_fixture: step 1's golden gap (0.37) lets the int8
# `fast` precision pick the other token.
golden='38036,43696,14654,43696,46075,44776,38439,13391,38498,27269,29639,25954,13002,46488,11648,2704\]'
gen() { "$bin/vlmd-run" -m "$dir/text.sealed" -f "$fx/tiny-smolvlm/golden/text/prompt.txt" --raw-prompt \
          -n 16 --ignore-eos --json --precision exact "$@"; }
gen --model-key-file "$dir/model.key" | tr -d ' \n' | grep -q "$golden" || fail "generate with a key file"
VLMD_MODEL_KEY=$key gen | tr -d ' \n' | grep -q "$golden" || fail "generate with VLMD_MODEL_KEY"
gen --model-key-command "test \"\$VLMD_KEY_ID\" = edge-1 && cat $dir/model.key" | tr -d ' \n' |
  grep -q "$golden" || fail "generate with a key command"

expect_error() {  # expect_error PATTERN ARGS...: exit 2 and one error line matching PATTERN
  local pattern=$1
  shift
  local err rc
  err=$(gen "$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq 2 ] || fail "exit $rc for $*"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "not one line: $err"
  printf '%s' "$err" | grep -q "$pattern" || fail "'$err' lacks '$pattern'"
}
expect_error "is a sealed model (key id 'edge-1'): no model key"
printf 'ffeeddccbbaa99887766554433221100\n' > "$dir/wrong.key"
expect_error "wrong key" --model-key-file "$dir/wrong.key"
size=$(stat -c %s "$dir/text.sealed")
# One byte inverted in the middle (writing a constant left the file as it was when the random
# nonce made that byte the constant already: 1 run in 256 loaded the "altered" file).
at=$((size / 2))
old=$(od -An -tu1 -j "$at" -N1 "$dir/text.sealed" | tr -d ' ')
printf "$(printf '\\%03o' $((old ^ 255)))" | dd of="$dir/text.sealed" bs=1 seek="$at" conv=notrunc status=none
new=$(od -An -tu1 -j "$at" -N1 "$dir/text.sealed" | tr -d ' ')
[ "$new" -eq $((old ^ 255)) ] || fail "the byte at $at was not inverted ($old -> $new)"
expect_error "fails authentication in chunk" --model-key-file "$dir/model.key"
truncate -s $((size - 1)) "$dir/text.sealed"
expect_error "is truncated" --model-key-file "$dir/model.key"
echo "sealed model CLI: ok"
