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

step "cargo test"
cargo test --workspace --locked

step "Python and TypeScript agents"
bash examples/agents/test.sh

echo
echo "all tests passed in $((SECONDS - started)) s"
