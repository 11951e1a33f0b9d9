#!/usr/bin/env bash
# Scale figures over gRPC (docs/benchmarks.md, "Large catalogs"): for each
# catalog size, a fresh registry (embedded; with REDIS=1 also Redis mode)
# is sent tools/10 announces of 10 tools each by `toolmesh-bench scale`,
# which times announce, heartbeat and ListTools and reads the registry's
# resident memory before, after the announces and after the lists.
#
#   scripts/scale.sh                 # 100, 1,000 and 10,000 tools
#   SCALE_SIZES="10000" scripts/scale.sh
#
# Prints a Markdown table. Every server is on loopback; every process it
# starts is stopped on exit. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=${SCALE_SIZES:-100 1000 10000}
base=${BENCH_PORT_BASE:-57000}

cargo build --release --locked -p toolmesh-bench -p toolmesh-registry --bins
bin="${CARGO_TARGET_DIR:-$PWD/target}/release"

# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

modes=(embedded)
if [ -n "${REDIS:-}" ]; then
    command -v redis-server >/dev/null || {
        export DEBIAN_FRONTEND=noninteractive
        ${SUDO:-} apt-get update -qq
        ${SUDO:-} apt-get install -y -qq --no-install-recommends redis-server >/dev/null
    }
    redis-server --port $((base + 99)) --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 &
    pids+=($!)
    modes+=(redis)
fi

echo "| mode | tools | instances | announces/s | tools announced/s | heartbeats/s | ListTools p50 (ms) | ListTools max (ms) | RSS empty (MiB) | RSS announced (MiB) | per tool (KiB) | RSS after lists (MiB) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
port=$base
for mode in "${modes[@]}"; do
    for tools in $sizes; do
        port=$((port + 1))
        extra=()
        if [ "$mode" = redis ]; then
            extra=(--redis "redis://127.0.0.1:$((base + 99))" --redis-prefix "scale$port")
        fi
        "$bin/toolmesh-registry" --listen "127.0.0.1:$port" --log warn \
            --max-tools "$tools" --max-instances "$tools" "${extra[@]}" >"$work/registry-$port.log" 2>&1 &
        pid=$!
        pids+=("$pid")
        for _ in $(seq 100); do
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
            sleep 0.1
        done
        line=$("$bin/toolmesh-bench" scale --target "http://127.0.0.1:$port" \
            --tools "$tools" --instances $((tools / 10)) --pid "$pid")
        python3 - "$mode" "$line" <<'EOF'
import json, sys
mode, r = sys.argv[1], json.loads(sys.argv[2])
empty, announced, listed = r["rss_before_kib"], r["rss_announced_kib"], r["rss_listed_kib"]
print(f"| {mode} | {r['tools']:,} | {r['instances']:,} | {r['announces_per_s']:,.0f} "
      f"| {r['tools_announced_per_s']:,.0f} | {r['heartbeats_per_s']:,.0f} "
      f"| {r['list_tools_p50_ms']:.1f} | {r['list_tools_max_ms']:.1f} "
      f"| {empty / 1024:.1f} | {announced / 1024:.1f} | {(announced - empty) / r['tools']:.1f} "
      f"| {listed / 1024:.1f} |")
EOF
        kill -INT "$pid" 2>/dev/null || true
    done
done
