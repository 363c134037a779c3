# Shared by tests/deploy/replicas_test.sh and bench/replicas.sh (source it): local vlmd
# replicas and HAProxy with deploy/haproxy/vlmd.cfg. The caller sets `work` (a scratch folder)
# before using these; `pids` holds what they started, for stop_all.
pids=()

# Stops (TERM) and reaps everything started so far.
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

# Starts replica $3 (an index) of binary $1 on the tiny-smolvlm fixture folder $2 on a port the
# kernel picks, waits until /ready; sets `port`. Returns 1 when it does not come up.
start_replica() {
  "$1" -m "$2/text.gguf" --mmproj "$2/mmproj.gguf" --port 0 -t 1 >"$work/r$3.log" 2>&1 &
  pids+=($!)
  port=""
  for _ in $(seq 200); do
    port=$(sed -n 's|.*vlmd listening on http://[^:]*:\([0-9][0-9]*\).*|\1|p' "$work/r$3.log" | head -n 1)
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" ]] || return 1
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/ready" >/dev/null && return 0; sleep 0.1; done
  return 1
}

# Starts HAProxy on config $1 with the environment assignments in the remaining arguments
# (VLMD_REPLICA_N=host:port) on a free loopback port, then waits out the health checks' rise;
# sets `lb` (its URL). Returns 1 when it does not start.
start_haproxy() {
  local cfg=$1
  shift
  lb=""
  for _ in $(seq 10); do
    local try=$(( 20000 + RANDOM % 40000 ))
    env "$@" VLMD_LB_BIND="127.0.0.1:$try" haproxy -db -f "$cfg" >"$work/haproxy.log" 2>&1 &
    local hp=$!
    sleep 0.5
    if kill -0 "$hp" 2>/dev/null; then
      pids+=("$hp")
      lb="http://127.0.0.1:$try"
      sleep 2  # health checks: rise 2 at 1 s
      return 0
    fi
  done
  return 1
}
