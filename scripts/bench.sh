#!/usr/bin/env bash
# The side-by-side benchmark (docs/benchmarks.md, "Side by side"): one SDK
# echo tool behind a sidecar, called six ways on this machine in one run:
#
#   direct          ToolRuntime.Execute on the same tool with no registry
#                   (toolmesh-bench echo --direct: the sidecar's runtime and
#                   HTTP/2 settings without its grant check, since the
#                   sidecar itself takes only calls the registry signed)
#   nginx           nginx grpc_pass in front of direct (bench/nginx.conf)
#   registry        the registry's Invoke, embedded
#   registry-1t     the same, the registry started with --worker-threads 1
#   registry-rl     the same, the tool rate-limited (a limit never reached)
#   redis-rl        the registry's Invoke in Redis mode, the tool rate-limited
#
# Every registry runs at its defaults but for what the path names: logging
# at info, one line per call, to a file, as a container's output is.
# Each path is called at 1, 16 and 128 calls in flight (-c 1 -m 1,
# -c 1 -m 16, -c 8 -m 16) and 100 B and 16 KiB of arguments, with the same load generator for every
# path (toolmesh-bench load: one thread, raw HTTP/2, pre-encoded requests,
# every answer checked for grpc-status 0). Rewrites the table in
# docs/benchmarks.md and draws docs/bench.svg. Not part of the test command:
# its figures are never asserted.
#
#   scripts/bench.sh            # 5 s per run (BENCH_SECONDS to change)
#
# Then every path again, driven by an independent client, h2load (nghttp2),
# with the same request bytes, in five rounds: its table (the spread of the
# rounds, each path against direct in the same round) is written beside
# ours (bench/h2load_table.py).
#
# Installs nginx, redis-server and nghttp2-client (Debian) when missing.
# Every server is on loopback; every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-5}
base=${BENCH_PORT_BASE:-55000}

if ! command -v nginx >/dev/null || ! command -v redis-server >/dev/null || ! command -v h2load >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO:-} apt-get update -qq
    ${SUDO:-} apt-get install -y -qq --no-install-recommends nginx redis-server nghttp2-client >/dev/null
fi

# The dist profile (Cargo.toml): whole-program optimization, for every
# path alike.
cargo build --profile dist --locked -p toolmesh-bench -p toolmesh-registry --bins
bin="${CARGO_TARGET_DIR:-$PWD/target}/dist"

# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

registry=127.0.0.1:$((base + 51))
redis_registry=127.0.0.1:$((base + 52))
registry_1t=127.0.0.1:$((base + 53))
sidecar=127.0.0.1:$((base + 61))
sidecar_rl=127.0.0.1:$((base + 62))
sidecar_redis=127.0.0.1:$((base + 63))
sidecar_1t=127.0.0.1:$((base + 64))
direct=127.0.0.1:$((base + 65))
nginx_at=127.0.0.1:$((base + 71))
redis_port=$((base + 79))

start redis redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no
start registry "$bin/toolmesh-registry" --listen "$registry"
start registry-1t "$bin/toolmesh-registry" --listen "$registry_1t" --worker-threads 1
start redis-registry "$bin/toolmesh-registry" --listen "$redis_registry" \
    --redis "redis://127.0.0.1:$redis_port" --redis-prefix "bench$$"
start echo "$bin/toolmesh-bench" echo --listen "$sidecar" --registry "http://$registry" --direct "$direct"
start echo-1t "$bin/toolmesh-bench" echo --listen "$sidecar_1t" --registry "http://$registry_1t" --instance-id echo-1t
start echo-rl "$bin/toolmesh-bench" echo --listen "$sidecar_rl" --registry "http://$registry" \
    --tool echo_limited --instance-id echo-rl --rate-limited
start echo-redis "$bin/toolmesh-bench" echo --listen "$sidecar_redis" --registry "http://$redis_registry" \
    --tool echo_limited --instance-id echo-redis --rate-limited
mkdir -p "$work/nginx"
sed -e "s|@PREFIX@|$work/nginx|g" -e "s|@LISTEN@|$nginx_at|" -e "s|@UPSTREAM@|$direct|" \
    bench/nginx.conf >"$work/nginx/nginx.conf"
start nginx nginx -c "$work/nginx/nginx.conf" -p "$work/nginx"

# path, target, method, tool
paths=(
    "direct $direct execute echo"
    "nginx $nginx_at execute echo"
    "registry $registry invoke echo"
    "registry-1t $registry_1t invoke echo"
    "registry-rl $registry invoke echo_limited"
    "redis-rl $redis_registry invoke echo_limited"
)

# Every path answers before anything is measured.
for spec in "${paths[@]}"; do
    read -r name target method tool <<<"$spec"
    answers "$name" "$bin/toolmesh-bench" "$target" "$method" "$tool"
done

results="$work/results.jsonl"
for payload in 100 16384; do
    for load in "1 1" "1 16" "8 16"; do
        read -r c m <<<"$load"
        for spec in "${paths[@]}"; do
            read -r name target method tool <<<"$spec"
            "$bin/toolmesh-bench" load --label "$name" --target "$target" --method "$method" \
                --tool "$tool" --payload "$payload" -c "$c" -m "$m" --seconds "$seconds" \
                | tee -a "$results"
        done
    done
done

python3 bench/render.py "$results" docs/benchmarks.md docs/bench.svg

# Every path again, driven by an independent client, h2load (nghttp2), with
# the same request bytes (`toolmesh-bench frame`), in rounds (H2LOAD_RUNS,
# 5 by default) so that the table gives each figure's spread: -c 8 -m 16
# for throughput, -c 1 -m 1 for the mean latency. h2load counts HTTP
# statuses, not grpc-status: the same bytes passed `answers` above.
for spec in "direct execute echo" "invoke invoke echo" "invoke-rl invoke echo_limited"; do
    read -r file method tool <<<"$spec"
    "$bin/toolmesh-bench" frame --method "$method" --tool "$tool" --payload 100 >"$work/$file.bin"
done
h2paths=(
    "direct $direct ToolRuntime/Execute direct"
    "nginx $nginx_at ToolRuntime/Execute direct"
    "registry $registry ToolRegistry/Invoke invoke"
    "registry-1t $registry_1t ToolRegistry/Invoke invoke"
    "registry-rl $registry ToolRegistry/Invoke invoke-rl"
    "redis-rl $redis_registry ToolRegistry/Invoke invoke-rl"
)
h2results="$work/h2load.jsonl"
for run in $(seq "${H2LOAD_RUNS:-5}"); do
    for load in "8 16" "1 1"; do
        read -r c m <<<"$load"
        for spec in "${h2paths[@]}"; do
            read -r name target method file <<<"$spec"
            h2load -t 1 -c "$c" -m "$m" -D "$seconds" --warm-up-time 1 \
                -d "$work/$file.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
                "http://$target/toolmesh.v1.$method" >"$work/h2load.txt"
            if ! grep -q ' 0 failed, 0 errored' "$work/h2load.txt"; then
                echo "h2load saw failures on $name:" >&2
                cat "$work/h2load.txt" >&2
                exit 1
            fi
            python3 bench/h2load_table.py parse "$work/h2load.txt" "$name" "$run" "$c" "$m" >>"$h2results"
        done
    done
    echo "h2load round $run done"
done
python3 bench/h2load_table.py render "$h2results" docs/benchmarks.md
