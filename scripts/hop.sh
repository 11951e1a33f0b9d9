#!/usr/bin/env bash
# The registry's hop, quickly, by h2load: an SDK echo tool behind a sidecar
# (toolmesh-bench echo), called directly (ToolRuntime.Execute on its
# --direct server: the sidecar takes only calls the registry signed) and
# through the registry (Invoke) in the same run, at -c 8 -m 16 and at -c 1 -m 1;
# with each server's CPU per call (from /proc, the warm-up included). For
# A/B runs of two registry binaries; scripts/bench.sh is the full table.
#
#   scripts/hop.sh                        # target/release, 4 s per run, 1 round
#   REGISTRY=/path/to/toolmesh-registry ROUNDS=3 SECONDS_PER_RUN=4 scripts/hop.sh
#   BIN=target/dist scripts/hop.sh        # after cargo build --profile dist
#   REDIS=1 scripts/hop.sh                # and Redis mode against embedded
#
# The registry runs at its defaults (logging at info: one line per call),
# its output in a file, as a container's is; REGISTRY_FLAGS adds flags
# (e.g. REGISTRY_FLAGS="--log warn").
#
# REDIS=1 adds a rate-limited echo tool (a limit never reached: the
# limiter's cost, not its effect) called through the embedded registry and
# through a second registry in Redis mode, on a redis-server of its own, at
# the same two loads, and prints redis-rl / registry-rl at -c 8 -m 16, and
# the GCRA scripts Redis ran per call (from INFO commandstats: under load
# one script decides several calls).
#
# h2load counts HTTP statuses, not grpc-status: each path first answers one
# call with grpc-status 0 from toolmesh-bench load, with the same bytes.
#
# Needs h2load (nghttp2-client), and redis-server and redis-cli for REDIS=1; loopback
# only; stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in h2load $([[ ${REDIS:-0} == 1 ]] && echo redis-server redis-cli); do
    command -v "$tool" >/dev/null || { echo "hop.sh: needs $tool (scripts/bench.sh installs it)" >&2; exit 1; }
done
bin=${BIN:-target/release}
registry=${REGISTRY:-$bin/toolmesh-registry}
secs=${SECONDS_PER_RUN:-4}
base=${HOP_PORT_BASE:-56000}
# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

# shellcheck disable=SC2086 # REGISTRY_FLAGS is a list of flags
start registry "$registry" --listen "127.0.0.1:$((base + 51))" ${REGISTRY_FLAGS:-}
registry_pid=${pids[-1]}
sleep 0.5
start echo "$bin/toolmesh-bench" echo --listen "127.0.0.1:$((base + 61))" \
    --registry "http://127.0.0.1:$((base + 51))" --direct "127.0.0.1:$((base + 65))"
echo_pid=${pids[-1]}
if [[ ${REDIS:-0} == 1 ]]; then
    start redis redis-server --port "$((base + 79))" --bind 127.0.0.1 --save "" --appendonly no
    sleep 0.5
    # shellcheck disable=SC2086
    start redis-registry "$registry" --listen "127.0.0.1:$((base + 52))" \
        --redis "redis://127.0.0.1:$((base + 79))" --redis-prefix "hop$$" ${REGISTRY_FLAGS:-}
    redis_registry_pid=${pids[-1]}
    sleep 0.5
    for side in "62 51 echo-rl" "63 52 echo-redis"; do
        read -r port registry_port instance <<<"$side"
        start "$instance" "$bin/toolmesh-bench" echo --listen "127.0.0.1:$((base + port))" \
            --registry "http://127.0.0.1:$((base + registry_port))" \
            --tool echo_limited --instance-id "$instance" --rate-limited
    done
    "$bin/toolmesh-bench" frame --method invoke --tool echo_limited --payload 100 >"$work/invoke-rl.bin"
fi
"$bin/toolmesh-bench" frame --method invoke --tool echo --payload 100 >"$work/invoke.bin"
"$bin/toolmesh-bench" frame --method execute --tool echo --payload 100 >"$work/execute.bin"

# EVALSHA calls the Redis server has answered so far.
scripts_run() {
    redis-cli -p "$((base + 79))" info commandstats | tr -d '\r' |
        awk -F'[=,]' '/^cmdstat_evalsha:/ {print $2; found = 1} END {if (!found) print 0}'
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # url frames c m pid
    local before after out
    before=$(ticks "$5")
    out=$(h2load -t 1 -c "$3" -m "$4" -D "$secs" --warm-up-time 1 -d "$2" \
        -H 'content-type: application/grpc' -H 'te: trailers' "$1" 2>&1)
    after=$(ticks "$5")
    grep -q ' 0 failed, 0 errored' <<<"$out" || { echo "$out" >&2; exit 1; }
    awk -v dt=$((after - before)) -v secs=$((secs + 1)) -v hz="$(getconf CLK_TCK)" '
        /^finished in/ {for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) r = $(i - 1)}
        /^time for request/ {m = $6}
        END {printf "%s calls/s, mean %s, %.1f µs CPU/call", r, m, dt * 1e6 / hz / (r * secs)}' <<<"$out"
}
direct=http://127.0.0.1:$((base + 65))/toolmesh.v1.ToolRuntime/Execute
through=http://127.0.0.1:$((base + 51))/toolmesh.v1.ToolRegistry/Invoke
through_redis=http://127.0.0.1:$((base + 52))/toolmesh.v1.ToolRegistry/Invoke
load="$bin/toolmesh-bench"
answers direct "$load" "127.0.0.1:$((base + 65))" execute echo
answers registry "$load" "127.0.0.1:$((base + 51))" invoke echo
if [[ ${REDIS:-0} == 1 ]]; then
    answers registry-rl "$load" "127.0.0.1:$((base + 51))" invoke echo_limited
    answers redis-rl "$load" "127.0.0.1:$((base + 52))" invoke echo_limited
fi
for round in $(seq "${ROUNDS:-1}"); do
    echo "round $round"
    echo "  -c 8 -m 16  direct:   $(run "$direct" "$work/execute.bin" 8 16 "$echo_pid")"
    echo "              registry: $(run "$through" "$work/invoke.bin" 8 16 "$registry_pid")"
    echo "  -c 1 -m 1   direct:   $(run "$direct" "$work/execute.bin" 1 1 "$echo_pid")"
    echo "              registry: $(run "$through" "$work/invoke.bin" 1 1 "$registry_pid")"
    if [[ ${REDIS:-0} == 1 ]]; then
        embedded=$(run "$through" "$work/invoke-rl.bin" 8 16 "$registry_pid")
        scripts_before=$(scripts_run)
        redis=$(run "$through_redis" "$work/invoke-rl.bin" 8 16 "$redis_registry_pid")
        scripts=$(($(scripts_run) - scripts_before))
        echo "  -c 8 -m 16  registry-rl: $embedded"
        echo "              redis-rl:    $redis"
        awk -v e="${embedded%% *}" -v r="${redis%% *}" -v s="$scripts" -v secs=$((secs + 1)) \
            'BEGIN {printf "              redis-rl / registry-rl: %.2fx; %.2f scripts per call\n", r / e, s / (r * secs)}'
        echo "  -c 1 -m 1   registry-rl: $(run "$through" "$work/invoke-rl.bin" 1 1 "$registry_pid")"
        echo "              redis-rl:    $(run "$through_redis" "$work/invoke-rl.bin" 1 1 "$redis_registry_pid")"
    fi
done
