#!/usr/bin/env bash
# What a task costs beside a plain Invoke (docs/benchmarks.md, "Tasks"): one
# echo tool behind the bench sidecar, called as Invoke, started as a task
# (Tasks.StartTask: the front door, the task stored, RunTask to the
# sidecar; the sidecar's report comes after the answer), and read back
# (Tasks.GetTask of one task), embedded and in Redis mode, at 1 and 128
# calls in flight, 100 B of arguments. toolmesh-bench load for all (raw
# HTTP/2, every answer checked for grpc-status 0). Not part of the test
# command: its figures are never asserted.
#
#   scripts/bench_tasks.sh      # 5 s per run (BENCH_SECONDS to change)
#
# Installs redis-server (Debian) when missing. Every server is on loopback;
# every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-5}
base=${BENCH_PORT_BASE:-57000}

if ! command -v redis-server >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO:-} apt-get update -qq
    ${SUDO:-} apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi

cargo build --release --locked -p toolmesh-bench -p toolmesh-registry --bins
bin="${CARGO_TARGET_DIR:-$PWD/target}/release"

# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

embedded=127.0.0.1:$((base + 1))
redis_registry=127.0.0.1:$((base + 2))
redis_port=$((base + 9))
# Starts outrun the echo's reports at 128 in flight: no live-task bound here.
room=(--max-tasks 1000000 --max-tasks-per-caller 1000000)

start redis redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no
start registry "$bin/toolmesh-registry" --listen "$embedded" --log warn "${room[@]}"
start redis-registry "$bin/toolmesh-registry" --listen "$redis_registry" --log warn "${room[@]}" \
    --redis "redis://127.0.0.1:$redis_port" --redis-prefix "bench$$"
start echo "$bin/toolmesh-bench" echo --listen 127.0.0.1:$((base + 11)) --registry "http://$embedded"
start echo-redis "$bin/toolmesh-bench" echo --listen 127.0.0.1:$((base + 12)) \
    --registry "http://$redis_registry" --instance-id echo-redis

for target in "$embedded" "$redis_registry"; do
    answers registry "$bin/toolmesh-bench" "$target" invoke echo
done

results="$work/results.jsonl"
for mode in "embedded $embedded" "redis $redis_registry"; do
    read -r label target <<<"$mode"
    for load in "1 1" "8 16"; do
        read -r c m <<<"$load"
        for method in invoke task-start task-get; do
            "$bin/toolmesh-bench" load --label "$label" --target "$target" --method "$method" \
                -c "$c" -m "$m" --seconds "$seconds" | tee -a "$results"
        done
    done
done

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print()
print("| mode | in flight | Invoke calls/s (p50) | StartTask calls/s (p50) | GetTask calls/s (p50) |")
print("|---|---|---|---|---|")
for mode in ("embedded", "redis"):
    for load in ((1, 1), (8, 16)):
        cells = []
        for method in ("invoke", "task-start", "task-get"):
            r = next(x for x in rows if x["label"] == mode and x["method"] == method
                     and (x["connections"], x["streams"]) == load)
            cells.append(f"{r['calls_per_s']:,.0f} ({r['p50_us']:.0f} µs)")
        print(f"| {mode} | {load[0] * load[1]} | " + " | ".join(cells) + " |")
PY
