#!/usr/bin/env bash
# Instructions the registry executes per Invoke, counted by valgrind's
# callgrind: the same binary, inputs and environment give the same count
# whatever else the machine is doing, so an A/B of two registry builds
# shows a change of 1 % that seconds-based runs on a shared 2-CPU machine
# cannot (their spread is ±15 %: docs/benchmarks.md, "The spread is the
# machine's"). The registry runs at its defaults under callgrind; an SDK
# echo tool behind a sidecar (toolmesh-bench echo) answers; h2load sends
# WARMUP calls, the counters are zeroed, then CALLS calls are counted.
#
#   scripts/instructions.sh                            # target/dist, -c 1 -m 1
#   REGISTRY=/tmp/a/toolmesh-registry scripts/instructions.sh
#   C=8 M=16 CALLS=20000 scripts/instructions.sh       # calls in flight together
#   DUMP=/tmp/counted.out scripts/instructions.sh      # keep the dump, for
#                                                      # callgrind_annotate
#   LIMITED=1 scripts/instructions.sh                  # a rate-limited tool
#   REDIS=1 scripts/instructions.sh                    # the same in Redis mode
#
# LIMITED=1 calls a rate-limited echo tool (a limit never reached: the
# limiter's cost, not its effect); REDIS=1 does too, with the registry in
# Redis mode on a redis-server of its own (installed when missing).
#
# Counts are instructions in the registry process (user space): the
# kernel's share of each syscall is not in them, and under valgrind the
# SHA-256 of the grant runs without the CPU's SHA extensions, so its share
# is larger than in a real run. Compare builds with each other, not with
# seconds. Installs valgrind, h2load (nghttp2-client) and, for REDIS=1,
# redis-server when missing;
# loopback only; stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
redis=${REDIS:-0}
if ! command -v callgrind_control >/dev/null || ! command -v h2load >/dev/null ||
    { [[ $redis == 1 ]] && ! command -v redis-server >/dev/null; }; then
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO:-} apt-get update -qq
    ${SUDO:-} apt-get install -y -qq --no-install-recommends valgrind nghttp2-client \
        $([[ $redis == 1 ]] && echo redis-server) >/dev/null
fi
bin=${BIN:-target/dist}
registry=${REGISTRY:-$bin/toolmesh-registry}
base=${INSTRUCTIONS_PORT_BASE:-56400}
calls=${CALLS:-10000}
# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

tool=echo
echo_flags=()
registry_flags=()
if [[ $redis == 1 || ${LIMITED:-0} == 1 ]]; then
    tool=echo_limited
    echo_flags=(--tool "$tool" --rate-limited)
fi
if [[ $redis == 1 ]]; then
    start redis redis-server --port "$((base + 79))" --bind 127.0.0.1 --save "" --appendonly no
    registry_flags=(--redis "redis://127.0.0.1:$((base + 79))" --redis-prefix "instructions$$")
    sleep 0.5
fi
start registry valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out.%p" \
    "$registry" --listen "127.0.0.1:$((base + 51))" "${registry_flags[@]}"
registry_pid=${pids[-1]}
start echo "$bin/toolmesh-bench" echo --listen "127.0.0.1:$((base + 61))" \
    --registry "http://127.0.0.1:$((base + 51))" --direct "127.0.0.1:$((base + 65))" "${echo_flags[@]}"
"$bin/toolmesh-bench" frame --method invoke --tool "$tool" --payload 100 >"$work/invoke.bin"
# Under callgrind the registry starts in seconds, not milliseconds.
for attempt in $(seq 120); do
    "$bin/toolmesh-bench" load --target "127.0.0.1:$((base + 51))" --method invoke --tool "$tool" \
        --seconds 0.1 --warmup 0 >/dev/null 2>&1 && break
    [[ $attempt == 120 ]] && { echo "the registry never answered; logs in $work" >&2; exit 1; }
    sleep 0.5
done
send() { # calls
    h2load -t 1 -c "${C:-1}" -m "${M:-1}" -n "$1" -d "$work/invoke.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$((base + 51))/toolmesh.v1.ToolRegistry/Invoke" >"$work/h2load.txt" 2>&1
    grep -q ' 0 failed, 0 errored' "$work/h2load.txt" || { cat "$work/h2load.txt" >&2; exit 1; }
}
# EVALSHA calls the Redis server has answered so far (0 without Redis).
scripts_run() {
    [[ $redis == 1 ]] || { echo 0; return; }
    redis-cli -p "$((base + 79))" info commandstats | tr -d '\r' |
        awk -F'[=,]' '/^cmdstat_evalsha:/ {print $2; found = 1} END {if (!found) print 0}'
}
send "${WARMUP:-2000}"
callgrind_control --zero "$registry_pid" >/dev/null 2>&1
scripts_before=$(scripts_run)
send "$calls"
callgrind_control --dump=counted "$registry_pid" >/dev/null 2>&1
scripts=$(($(scripts_run) - scripts_before))
dump=$(ls "$work"/callgrind.out.*.* 2>/dev/null | head -1)
[[ -n $dump ]] || { echo "callgrind wrote no dump" >&2; exit 1; }
[[ -z ${DUMP:-} ]] || cp "$dump" "$DUMP"
awk -v calls="$calls" -v c="${C:-1}" -v m="${M:-1}" -v scripts="$scripts" -v redis="$redis" '
    /^summary:/ {total = $2}
    END {
        printf "%.0f instructions per call (%d calls, -c %s -m %s", total / calls, calls, c, m
        if (redis == 1) printf "; %.2f Redis scripts per call", scripts / calls
        print ")"
    }' "$dump"
