#!/usr/bin/env bash
# The whole test suite: formatting, lints, every Rust test (unit, property,
# end to end against real servers on loopback), the demo, and the Python and
# TypeScript agents against the real binaries. Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
started=$SECONDS

step "system packages"
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    # Debian's redis-server (and redis-tools for redis-cli); tests start
    # their own servers on loopback ports, never the system service.
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO:-} apt-get update -qq
    ${SUDO:-} apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
fi
redis-server --version
export TOOLMESH_REQUIRE_REDIS=1

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build --bins (the binaries the end-to-end tests start)"
cargo build --workspace --bins --locked
export TOOLMESH_BIN_DIR="${CARGO_TARGET_DIR:-$PWD/target}/debug"

log=$(mktemp)
trap 'rm -f "$log"' EXIT

step "cargo test"
cargo test --workspace --locked 2>&1 | tee -a "$log"

step "Python and TypeScript agents"
bash examples/agents/test.sh 2>&1 | tee -a "$log"

# One closing line over every runner: cargo's "test result" lines, pytest's
# "N passed", node's "ℹ pass N" / "ℹ fail N".
passed=$(( $(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}') \
         + $(grep -oE '^[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}') \
         + $(grep -oE 'ℹ pass [0-9]+' "$log" | awk '{s+=$3} END {print s+0}') ))
failed=$(( $(grep -oE '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}') \
         + $(grep -oE 'ℹ fail [0-9]+' "$log" | awk '{s+=$3} END {print s+0}') ))
echo
echo "all tests passed in $((SECONDS - started)) s"
echo "$passed passed, $failed failed"
