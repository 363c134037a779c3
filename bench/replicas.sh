#!/usr/bin/env bash
# Requests/s through HAProxy (deploy/haproxy/vlmd.cfg, replicas left out of it as asked) at 1, 2
# and 3 vlmd replicas, against one replica reached directly, measured in the same run with
# `vlmd-bench serve` (distinct images: every request encodes). On a machine with fewer cores than
# replicas x threads this measures the balancer's and the routing's overhead, not a scale-up.
# Usage: bench/replicas.sh [BUILD_DIR] [REQUESTS] [CONCURRENCY]   (needs haproxy)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
requests=${2:-96}
concurrency=${3:-4}
fixtures="$root/tests/fixtures/tiny-smolvlm"
image="$fixtures/images/img-128x96.png"
work=$(mktemp -d "${TMPDIR:-/tmp}/vlmd-bench-replicas.XXXXXX")
source "$root/tests/deploy/replicas_lib.sh"
trap 'stop_all; rm -rf "$work"' EXIT

throughput() {  # $1 URL: prints images/s
  "$build/bin/vlmd-bench" serve --url "$1" -c "$concurrency" -n 8 --image "$image" --max-tokens 8 \
    --distinct-images >/dev/null  # warm-up
  "$build/bin/vlmd-bench" serve --url "$1" -c "$concurrency" -n "$requests" --image "$image" \
    --max-tokens 8 --distinct-images --json | sed -n 's/.*"throughput_images_s": *\([0-9.]*\).*/\1/p'
}

start_replica "$build/bin/vlmd" "$fixtures" 1 || { echo "replicas bench: no replica" >&2; exit 1; }
direct=$(throughput "http://127.0.0.1:$port")
stop_all
echo "CPU: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores"
echo "requests: $requests, concurrency $concurrency, tiny-smolvlm fixture, 8 tokens, distinct images"
printf '%-26s %12s %10s\n' "setup" "images/s" "ratio"
printf '%-26s %12.2f %10s\n' "1 replica, direct" "$direct" "1.00"
for n in 1 2 3; do
  env_args=()
  for i in $(seq "$n"); do
    start_replica "$build/bin/vlmd" "$fixtures" "$i" || { echo "replicas bench: no replica $i" >&2; exit 1; }
    env_args+=("VLMD_REPLICA_$i=127.0.0.1:$port")
  done
  # The shipped file without the server lines of replicas not started.
  cp "$root/deploy/haproxy/vlmd.cfg" "$work/haproxy.cfg"
  for i in $(seq $((n + 1)) 3); do sed -i "/VLMD_REPLICA_$i}/d" "$work/haproxy.cfg"; done
  start_haproxy "$work/haproxy.cfg" "${env_args[@]}" || { echo "replicas bench: no haproxy" >&2; exit 1; }
  got=$(throughput "$lb")
  printf '%-26s %12.2f %10.2f\n' "$n replica(s), HAProxy" "$got" "$(awk -v a="$got" -v b="$direct" 'BEGIN { print a / b }')"
  stop_all
done
