#!/usr/bin/env bash
# Scale curves in one command (docs/benchmarks.md, "Large catalogs over
# gRPC" and "Scale-out in Redis Cluster mode"):
#
# 1. Catalog size. For each size, a fresh release registry (embedded; with
#    REDIS=1 also Redis mode, on one standalone redis-server) is sent
#    tools/10 announces of ten tools each by `toolmesh-bench scale`, which
#    times announce and heartbeat throughput, the whole catalog listed page
#    by page, a page of 100 at the start and 90 % of the way in, `GetTool`
#    of random names and `SearchTools`, reads the registry's resident
#    memory, and lets every lease expire to measure the CPU the sweep spends.
# 2. Scale-out. A three-master Redis Cluster on loopback; for each replica
#    count, that many registries on it (one key prefix per count), two
#    shared echo sidecars announced through the first replica (`echo`,
#    unlimited, and `echo_limited`, with a global limit of SCALE_RATE/s and
#    burst SCALE_BURST), and `toolmesh-bench scale-out` calling through
#    every replica at once for SCALE_SECONDS: calls/s per replica, and the
#    limited tool's accepted calls against rate × seconds + burst.
#
# Then bench/plot_scale.py rewrites the tables between the scale markers of
# docs/benchmarks.md and draws docs/scale.svg and docs/scale-out.svg.
#
#   scripts/scale.sh                          # 1,000, 10,000, 100,000 tools; 1, 2, 4, 8 replicas
#   SCALE_QUICK=1 scripts/scale.sh            # 1,000 tools; 1 and 2 replicas; shorter runs
#   SCALE_SIZES="1000" SCALE_REPLICAS="1 2" scripts/scale.sh
#   SCALE_REPLICAS="" scripts/scale.sh        # catalog sizes only (SCALE_SIZES="": scale-out only)
#   SCALE_DOCS=0 scripts/scale.sh             # print the tables; leave docs/ as it is
#
# The raw JSON lines are kept in SCALE_RESULTS (target/scale). Other
# knobs: SCALE_SECONDS (scale-out window, 5), SCALE_CONCURRENCY
# (calls in flight per replica, 8), SCALE_RATE (2000), SCALE_BURST (100),
# SCALE_CALLS (timed calls per read, 200), SCALE_LISTS (whole-catalog
# walks, 10), SCALE_LEASE_TTL (the catalog registries' lease TTL, 20s: long
# enough that 100,000 tools are announced before the first lease is due;
# the sweep runs every second from 10 s up), BENCH_PORT_BASE (registries and sidecars, 57000),
# SCALE_REDIS_PORT (first Cluster node, 46379: a node's bus port is its
# port + 10,000). Installs redis-server and redis-tools (Debian) when
# missing. Every server is on loopback; every process it starts is stopped
# on exit. Not part of the test command: its figures are never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${SCALE_QUICK:-}" ]; then
    sizes=${SCALE_SIZES-1000}
    replica_counts=${SCALE_REPLICAS-1 2}
    seconds=${SCALE_SECONDS:-2}
    calls=${SCALE_CALLS:-50}
    lists=${SCALE_LISTS:-3}
else
    sizes=${SCALE_SIZES-1000 10000 100000}
    replica_counts=${SCALE_REPLICAS-1 2 4 8}
    seconds=${SCALE_SECONDS:-5}
    calls=${SCALE_CALLS:-200}
    lists=${SCALE_LISTS:-10}
fi
concurrency=${SCALE_CONCURRENCY:-8}
rate=${SCALE_RATE:-2000}
burst=${SCALE_BURST:-100}
lease_ttl=${SCALE_LEASE_TTL:-20s}
base=${BENCH_PORT_BASE:-57000}
cluster_port=${SCALE_REDIS_PORT:-46379}

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    if [ -n "${REDIS:-}" ] || [ -n "$replica_counts" ]; then
        export DEBIAN_FRONTEND=noninteractive
        ${SUDO:-} apt-get update -qq
        ${SUDO:-} apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
    fi
fi

cargo build --release --locked -p toolmesh-bench -p toolmesh-registry --bins
bin="${CARGO_TARGET_DIR:-$PWD/target}/release"

# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
catalog="$work/catalog.jsonl"
scale_out="$work/scale-out.jsonl"
: >"$catalog"
: >"$scale_out"

listening() { # port: waits (10 s) until something accepts on 127.0.0.1:port
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1; logs in $work:" >&2
    tail -n 5 "$work"/*.log >&2
    exit 1
}

exited() { # pid: gone, or a zombie waiting to be reaped
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
    [ -z "$state" ] || [ "$state" = Z ]
}

stop() { # pids (started here): SIGINT, SIGKILL after 15 s, reaped, and forgotten
    local pid kept=() attempt
    for pid in "$@"; do kill -INT "$pid" 2>/dev/null || true; done
    for pid in "$@"; do
        for attempt in $(seq 150); do
            exited "$pid" && break
            sleep 0.1
        done
        exited "$pid" || kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    # The cleanup on exit signals what is still listed: never a reaped pid.
    for pid in "${pids[@]}"; do
        [[ " $* " == *" $pid "* ]] || kept+=("$pid")
    done
    pids=("${kept[@]}")
}

# 1. Catalog size.
modes=(embedded)
if [ -n "${REDIS:-}" ] && [ -n "$sizes" ]; then
    start redis redis-server --port $((base + 99)) --bind 127.0.0.1 --save "" --appendonly no
    modes+=(redis)
fi
port=$base
for mode in "${modes[@]}"; do
    for tools in $sizes; do
        port=$((port + 1))
        admin=$((port + 50))
        extra=()
        if [ "$mode" = redis ]; then
            extra=(--redis "redis://127.0.0.1:$((base + 99))" --redis-prefix "scale$port")
        fi
        start "registry-$port" "$bin/toolmesh-registry" --listen "127.0.0.1:$port" \
            --admin-listen "127.0.0.1:$admin" --log warn --lease-ttl "$lease_ttl" \
            --max-tools "$tools" --max-instances "$tools" "${extra[@]}"
        pid=${pids[-1]}
        listening "$port"
        echo "catalog: $mode, $tools tools" >&2
        line=$("$bin/toolmesh-bench" scale --target "http://127.0.0.1:$port" \
            --tools "$tools" --instances $((tools / 10)) --pid "$pid" --admin "127.0.0.1:$admin" \
            --calls "$calls" --lists "$lists")
        printf '{"mode":"%s","result":%s}\n' "$mode" "$line" >>"$catalog"
        stop "$pid"
    done
done

# 2. Scale-out on a Redis Cluster.
if [ -n "$replica_counts" ]; then
    nodes=()
    for i in 0 1 2; do
        node=$((cluster_port + i))
        mkdir -p "$work/redis-$node"
        start "redis-$node" redis-server --port "$node" --bind 127.0.0.1 --save "" --appendonly no \
            --protected-mode no --dir "$work/redis-$node" --cluster-enabled yes \
            --cluster-config-file nodes.conf --cluster-node-timeout 2000
        nodes+=("127.0.0.1:$node")
    done
    for node in "${nodes[@]}"; do
        for _ in $(seq 100); do
            redis-cli -p "${node#*:}" ping >/dev/null 2>&1 && break
            sleep 0.1
        done
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log"
    for node in "${nodes[@]}"; do
        for attempt in $(seq 300); do
            redis-cli -p "${node#*:}" cluster info | grep -q cluster_state:ok && break
            if [ "$attempt" = 300 ]; then
                echo "the Redis Cluster never became healthy at $node" >&2
                exit 1
            fi
            sleep 0.1
        done
    done

    for n in $replica_counts; do
        echo "scale-out: $n replicas" >&2
        started=()
        targets=()
        for i in $(seq 0 $((n - 1))); do
            port=$((base + 100 + i))
            start "replica-$n-$i" "$bin/toolmesh-registry" --listen "127.0.0.1:$port" --log warn \
                --redis "redis://${nodes[0]}" --redis-cluster --redis-prefix "scaleout$n"
            started+=("${pids[-1]}")
            targets+=("http://127.0.0.1:$port")
        done
        for target in "${targets[@]}"; do listening "${target##*:}"; done
        start "echo-$n" "$bin/toolmesh-bench" echo --listen "127.0.0.1:$((base + 120))" \
            --registry "${targets[0]}" --instance-id "echo-$n"
        started+=("${pids[-1]}")
        start "echo-limited-$n" "$bin/toolmesh-bench" echo --listen "127.0.0.1:$((base + 121))" \
            --registry "${targets[0]}" --instance-id "echo-limited-$n" --tool echo_limited \
            --rate "$rate" --burst "$burst"
        started+=("${pids[-1]}")
        for target in "${targets[@]}"; do
            answers "replica ${target##*:}" "$bin/toolmesh-bench" "$target" invoke echo
        done
        all=$(IFS=,; echo "${targets[*]}")
        "$bin/toolmesh-bench" scale-out --targets "$all" --tool echo \
            --seconds "$seconds" --concurrency "$concurrency" >>"$scale_out"
        "$bin/toolmesh-bench" scale-out --targets "$all" --tool echo_limited \
            --seconds "$seconds" --concurrency "$concurrency" --warmup 0 \
            --rate "$rate" --burst "$burst" >>"$scale_out"
        stop "${started[@]}"
    done
fi

results=${SCALE_RESULTS:-target/scale}
mkdir -p "$results"
cp "$catalog" "$scale_out" "$results/"
echo "raw results in $results/" >&2

docs=()
if [ "${SCALE_DOCS:-1}" != 0 ]; then
    docs=(--doc docs/benchmarks.md --svg-dir docs)
fi
python3 bench/plot_scale.py --catalog "$catalog" --scale-out "$scale_out" \
    --load-before "$load_before" "${docs[@]}"
