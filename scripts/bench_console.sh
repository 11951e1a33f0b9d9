#!/usr/bin/env bash
# The console's pages at a large catalog: a fresh registry (embedded, no
# API keys, so the console on loopback serves the anonymous viewer) with
# --console-listen, sent CONSOLE_TOOLS/10 announces of 10 tools each by
# `toolmesh-bench console`, which then times each page (catalog, deep page,
# filters, search, a tool, its playground, instances, calls, approvals)
# over HTTP/1.1 keep-alive and reads the registry's resident memory.
#
#   scripts/bench_console.sh                       # 10,000 tools, 50 GETs a page
#   CONSOLE_TOOLS=1000 CONSOLE_REQUESTS=200 scripts/bench_console.sh
#
# Prints a Markdown table. The lease TTL is long enough that nothing needs
# a heartbeat. Every server is on loopback, on ports the system chose
# (BENCH_PORT_BASE to fix them); every process it starts is stopped on
# exit. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=${CONSOLE_TOOLS:-10000}
requests=${CONSOLE_REQUESTS:-50}

cargo build --release --locked -p toolmesh-bench -p toolmesh-registry --bins
bin="${CARGO_TARGET_DIR:-$PWD/target}/release"
# What was built: the commit, and whether registry/ differed from it.
echo "Registry built at $(git log --oneline -1 | cut -c1-72)"
if ! git diff --quiet HEAD -- registry || [ -n "$(git ls-files --others --exclude-standard registry)" ]; then
    echo "with uncommitted changes under registry/ (diff $( (git diff HEAD -- registry; git ls-files --others --exclude-standard registry | xargs -r cat) | sha256sum | cut -c1-12))"
fi
echo

# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

if [ -n "${BENCH_PORT_BASE:-}" ]; then
    grpc=$((BENCH_PORT_BASE + 1))
    console=$((BENCH_PORT_BASE + 2))
else
    # Two ports free now (closed again at once: the registry binds them).
    read -r grpc console < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')
fi

start registry "$bin/toolmesh-registry" --listen "127.0.0.1:$grpc" \
    --console-listen "127.0.0.1:$console" --log warn --lease-ttl 300s \
    --max-tools "$tools" --max-instances "$tools"
registry_pid=${pids[-1]}
for port in "$grpc" "$console"; do
    for attempt in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        if [ "$attempt" = 100 ] || ! kill -0 "$registry_pid" 2>/dev/null; then
            echo "the registry never listened on $port; its log:" >&2
            tail -n 20 "$work/registry.log" >&2
            exit 1
        fi
        sleep 0.1
    done
done

"$bin/toolmesh-bench" console --registry "http://127.0.0.1:$grpc" \
    --console "http://127.0.0.1:$console" --tools "$tools" --requests "$requests" \
    --pid "$registry_pid"
