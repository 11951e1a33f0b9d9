#!/usr/bin/env bash
# Invoke beside search (docs/benchmarks.md, "Search with a model"): the
# registry with no model and with --search-model (all-MiniLM-L6-v2,
# scripts/search-model.sh), the SDK echo tool behind a sidecar, Invoke at
# 1 and at 128 calls in flight (toolmesh-bench load); then the same on the
# registry with and without the model while h2load sends SearchTools as
# fast as 32 streams allow (the burst; without a model it measures what
# serving the burst costs, with one what the model adds), and the
# burst's own figures. Not part of the
# test command: its figures are never asserted.
#
#   scripts/bench_search.sh      # 5 s per run (BENCH_SECONDS to change)
#
# Installs nghttp2-client (Debian) when missing. Every server is on
# loopback; every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${BENCH_SECONDS:-5}
base=${BENCH_PORT_BASE:-56000}

if ! command -v h2load >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO:-} apt-get update -qq
    ${SUDO:-} apt-get install -y -qq --no-install-recommends nghttp2-client >/dev/null
fi
model=$(bash scripts/search-model.sh)
cargo build --release --locked -p toolmesh-bench -p toolmesh-registry --bins
bin="${CARGO_TARGET_DIR:-$PWD/target}/release"

# shellcheck source=scripts/lib/background.sh
source scripts/lib/background.sh

plain=127.0.0.1:$((base + 1))
with_model=127.0.0.1:$((base + 2))
start plain "$bin/toolmesh-registry" --listen "$plain" --log warn
start model "$bin/toolmesh-registry" --listen "$with_model" --log warn --search-model "$model"
start echo-plain "$bin/toolmesh-bench" echo --listen "127.0.0.1:$((base + 11))" --registry "http://$plain"
start echo-model "$bin/toolmesh-bench" echo --listen "127.0.0.1:$((base + 12))" --registry "http://$with_model"
answers plain "$bin/toolmesh-bench" "$plain" invoke echo
answers model "$bin/toolmesh-bench" "$with_model" invoke echo

# A SearchTools request as h2load sends it: the gRPC frame of
# SearchToolsRequest { query = 1 } (one string field).
python3 - "$work/search.bin" <<'PY'
import struct, sys
query = "say this sentence in Japanese".encode()
message = b"\x0a" + bytes([len(query)]) + query
open(sys.argv[1], "wb").write(b"\x00" + struct.pack(">I", len(message)) + message)
PY

invoke() { # label, target, -c, -m
    "$bin/toolmesh-bench" load --label "$1" --target "$2" --method invoke --tool echo \
        -c "$3" -m "$4" --seconds "$seconds"
}

for load in "1 1" "8 16"; do
    read -r c m <<<"$load"
    invoke "no model" "$plain" "$c" "$m"
    invoke "model loaded" "$with_model" "$c" "$m"
    for target in "$plain" "$with_model"; do
        label="no model, search burst"
        [ "$target" = "$with_model" ] && label="model, search burst"
        h2load -t 1 -c 8 -m 4 -D "$((seconds + 2))" -d "$work/search.bin" \
            -H 'content-type: application/grpc' -H 'te: trailers' \
            "http://$target/toolmesh.v1.ToolRegistry/SearchTools" >"$work/burst.txt" &
        burst=$!
        sleep 1
        invoke "$label" "$target" "$c" "$m"
        wait "$burst"
        echo "  the burst (h2load -c 8 -m 4, SearchTools):"
        grep -E "^requests:|^finished in|time for request:" "$work/burst.txt" | sed 's/^/    /'
    done
done
