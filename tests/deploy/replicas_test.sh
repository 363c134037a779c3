#!/usr/bin/env bash
# Three vlmd replicas behind a real HAProxy started with the shipped deploy/haproxy/vlmd.cfg
# (issue 25): a camera stream keeps its window on one replica across 20 frames; a repeated image
# sent with its digest as the routing key is a cache hit the second time; a replica killed
# mid-run loses no request that the balancer can retry, and the stream that lived there says
# "lost" on the replica that takes it over, then builds its window again.
# Usage: replicas_test.sh VLMD_BINARY SOURCE_DIR. Exit 77 (skipped) without haproxy or curl.
set -euo pipefail

vlmd=$1
root=$2
command -v haproxy >/dev/null || { echo "replicas_test: no haproxy (scripts/setup.sh installs it)"; exit 77; }
command -v curl >/dev/null || { echo "replicas_test: no curl"; exit 77; }
fixtures="$root/tests/fixtures/tiny-smolvlm"
work=$(mktemp -d "${TMPDIR:-/tmp}/vlmd-replicas.XXXXXX")
source "$root/tests/deploy/replicas_lib.sh"
trap 'stop_all; rm -rf "$work"' EXIT
fail() {
  echo "replicas_test: FAIL: $*" >&2
  for f in "$work"/*.log; do echo "---- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}

ports=()
for i in 1 2 3; do
  start_replica "$vlmd" "$fixtures" "$i" || fail "replica $i did not come up"
  ports+=("$port")
done
replica_pid() { echo "${pids[$(( ${1#replica} - 1 ))]}"; }
start_haproxy "$root/deploy/haproxy/vlmd.cfg" VLMD_REPLICA_1="127.0.0.1:${ports[0]}" \
  VLMD_REPLICA_2="127.0.0.1:${ports[1]}" VLMD_REPLICA_3="127.0.0.1:${ports[2]}" ||
  fail "haproxy did not start"

# POST an invoke through the balancer: $1 routing key ("" for none), $2 JSON body file.
# Prints "STATUS REPLICA BODY".
post() {
  local hdr=() out
  [[ -n "$1" ]] && hdr=(-H "X-Vlmd-Route-Key: $1")
  out=$(curl -s -D "$work/headers" -o "$work/body" -w '%{http_code}' "${hdr[@]}" \
    -H 'Content-Type: application/json' --data-binary @"$2" "$lb/v1/vlm/invoke") || out=000
  local replica
  replica=$(sed -n 's/^[Xx]-[Vv]lmd-[Rr]eplica: *\([a-z0-9]*\).*/\1/p' "$work/headers" | head -n 1)
  echo "$out ${replica:-none} $(cat "$work/body")"
}
json_int() { sed -n "s/.*\"$1\":\([0-9-][0-9]*\).*/\1/p" <<<"$2" | head -n 1; }
frame_body() {  # $1 stream frame number; frames alternate between two pictures (motion)
  local img=$fixtures/images/img-128x96.png
  (( $1 % 2 == 1 )) && img=$root/tests/data/redact/astronaut.jpg
  printf '{"prompt":"What changed?","max_tokens":2,"stream_id":"cam-1","stream_frame":%d,"image_base64":"%s"}' \
    "$1" "$(base64 -w0 "$img")" >"$work/frame.json"
}

# 1. A stream stays on one replica and keeps its window.
holder=""
for f in $(seq 0 19); do
  frame_body "$f"
  read -r status replica body <<<"$(post cam-1 "$work/frame.json")"
  [[ "$status" == 200 ]] || fail "frame $f: HTTP $status: $body"
  [[ -z "$holder" ]] && holder=$replica
  [[ "$replica" == "$holder" ]] || fail "frame $f went to $replica, the stream is on $holder"
  ctx=$(json_int context_frames "$body")
  if (( f == 0 )); then
    grep -q '"no_context_reason":"first_frame"' <<<"$body" || fail "frame 0: $body"
  elif (( ctx < 1 )); then
    fail "frame $f has no earlier frame: $body"
  fi
done
echo "replicas_test: 20 frames of cam-1 on $holder, each with its earlier frames"

# 2. A repeated image, its digest as the key: the second request is a cache hit.
img="$fixtures/images/img-50x100.png"
digest=$(sha256sum "$img" | cut -c1-64)
printf '{"prompt":"Describe it.","max_tokens":2,"image_base64":"%s"}' "$(base64 -w0 "$img")" >"$work/image.json"
read -r status r1 body <<<"$(post "$digest" "$work/image.json")"
[[ "$status" == 200 ]] || fail "image: HTTP $status: $body"
grep -q '"image":"miss"' <<<"$body" || fail "first image request: $body"
read -r status r2 body <<<"$(post "$digest" "$work/image.json")"
[[ "$status" == 200 && "$r2" == "$r1" ]] || fail "repeat went to $r2 (first on $r1): $status $body"
grep -q '"image":"hit"' <<<"$body" || fail "repeated image was not a cache hit: $body"
echo "replicas_test: repeated image a cache hit on $r1"

# 3. The stream's replica dies: nothing the balancer can retry fails; the stream says "lost"
# where it lands, then builds its window again there.
kill -KILL "$(replica_pid "$holder")"
# At once, before the health checks notice: a request hashed to the dead replica is retried on
# another (its connection fails), so it does not fail.
frame_body 99
sed -i 's/"stream_id":"cam-1"/"stream_id":"cam-probe"/' "$work/frame.json"
read -r status replica body <<<"$(post cam-1 "$work/frame.json")"
[[ "$status" == 200 ]] || fail "the request right after the kill: HTTP $status: $body"
[[ "$replica" != "$holder" ]] || fail "answered by the dead replica $holder"
# Once HAProxy has marked it down (fall 2 at 1 s), the stream's key has its new place on the
# ring: the stream continues there.
sleep 3
frame_body 20
read -r status replica body <<<"$(post cam-1 "$work/frame.json")"
[[ "$status" == 200 ]] || fail "first frame after the kill: HTTP $status: $body"
[[ "$replica" != "$holder" ]] || fail "frame 20 answered by the dead replica $holder"
grep -q '"no_context_reason":"lost"' <<<"$body" || fail "frame 20 did not say lost: $body"
taker=$replica
for f in $(seq 21 25); do
  frame_body "$f"
  read -r status replica body <<<"$(post cam-1 "$work/frame.json")"
  [[ "$status" == 200 && "$replica" == "$taker" ]] || fail "frame $f: $status on $replica: $body"
  (( $(json_int context_frames "$body") >= 1 )) || fail "frame $f after the takeover: $body"
done
# Requests without a key, and with other keys, all answered by the two replicas left.
for i in $(seq 1 12); do
  key=""
  (( i % 2 == 0 )) && key="client-$i"
  read -r status replica body <<<"$(post "$key" "$work/image.json")"
  [[ "$status" == 200 ]] || fail "request $i after the kill: HTTP $status on $replica: $body"
  [[ "$replica" != "$holder" ]] || fail "request $i answered by the dead replica"
done
echo "replicas_test: $holder killed; a request at once was retried; cam-1 said lost on $taker and rebuilt; 19 requests after, none failed"
echo "replicas_test: OK"
