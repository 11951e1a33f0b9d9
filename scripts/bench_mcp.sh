#!/usr/bin/env bash
# The MCP benchmark (docs/benchmarks.md, "MCP both ways"): the same load
# generator as scripts/bench.sh (toolmesh-bench load: one thread, raw
# HTTP/2, every answer checked) on four paths through one registry:
#
#   invoke-sdk       Invoke of an SDK echo tool (the baseline)
#   invoke-stdio     Invoke of server-everything's echo, wrapped by a
#                    sidecar over stdio (Node)
#   invoke-http      Invoke of a Python SDK server's echo, wrapped by a
#                    sidecar over streamable HTTP
#   mcp-sdk          tools/call (2026-07-28) of the SDK echo tool on the
#                    registry's /mcp: the MCP front door instead of gRPC
#
# at 1 and 16 calls in flight, 100 B of arguments. Prints one JSON line per
# run. Not part of the test command: its figures are never asserted.
#
#   scripts/bench_mcp.sh        # 5 s per run (BENCH_SECONDS to change)
#
# Needs the MCP peers the test command installs (npm ci in scripts/mcp;
# the Python mcp SDK from scripts/requirements.txt). Every server is on
# loopback; every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-5}
base=${BENCH_PORT_BASE:-56000}
python=${PYTHON:-python3}

if ! cmp -s scripts/mcp/package-lock.json scripts/mcp/node_modules/.installed-package-lock.json; then
    (cd scripts/mcp && npm ci --no-audit --no-fund --loglevel=error &&
        cp package-lock.json node_modules/.installed-package-lock.json)
fi
"$python" -c 'import mcp' 2>/dev/null ||
    PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet -r scripts/requirements.txt

cargo build --release --locked -p toolmesh-bench -p toolmesh-registry -p toolmesh-sidecar --bins
bin="${CARGO_TARGET_DIR:-$PWD/target}/release"

# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

registry=127.0.0.1:$((base + 1))
mcp=127.0.0.1:$((base + 2))
sidecar_sdk=127.0.0.1:$((base + 11))
sidecar_stdio=127.0.0.1:$((base + 12))
sidecar_http=127.0.0.1:$((base + 13))
python_port=$((base + 21))

start registry "$bin/toolmesh-registry" --listen "$registry" --mcp-listen "$mcp" --log warn
start echo "$bin/toolmesh-bench" echo --listen "$sidecar_sdk" --registry "http://$registry"
start python "$python" sidecar/tests/mcp/python_server.py "$python_port"
cat >"$work/stdio.yaml" <<YAML
tools:
  - backend:
      mcp:
        command: [$PWD/scripts/mcp/node_modules/.bin/mcp-server-everything]
        prefix: everything.
        allow: [echo]
YAML
cat >"$work/http.yaml" <<YAML
tools:
  - backend:
      mcp:
        url: http://127.0.0.1:$python_port/mcp
        prefix: py.
        allow: [echo]
YAML
start stdio "$bin/toolmesh-sidecar" --config "$work/stdio.yaml" --listen "$sidecar_stdio" \
    --registry "http://$registry" --log warn
start http "$bin/toolmesh-sidecar" --config "$work/http.yaml" --listen "$sidecar_http" \
    --registry "http://$registry" --log warn

load() { # label, method, target, tool, field, -c, -m, seconds, warmup
    "$bin/toolmesh-bench" load --label "$1" --method "$2" --target "http://$3" --tool "$4" \
        --field "$5" -c "$6" -m "$7" --seconds "$8" --warmup "$9" --payload 100
}

# Every path answers before anything is measured.
ready() { # label, method, target, tool, field
    for _ in $(seq 1 120); do
        if load "$1" "$2" "$3" "$4" "$5" 1 1 0.05 0 >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    echo "error: $1 never answered; logs in $work:" >&2
    tail -n 20 "$work"/*.log >&2
    exit 1
}

paths=(
    "invoke-sdk invoke $registry echo text"
    "invoke-stdio invoke $registry everything.echo message"
    "invoke-http invoke $registry py.echo text"
    "mcp-sdk mcp $mcp echo text"
)
for path in "${paths[@]}"; do
    # shellcheck disable=SC2086
    ready $path
done
for shape in "1 1" "1 16"; do
    for path in "${paths[@]}"; do
        # shellcheck disable=SC2086
        load $path $shape "$seconds" 1
    done
done
