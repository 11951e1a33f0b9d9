#!/usr/bin/env bash
# The whole test suite: formatting, lints, every Rust test (unit, property,
# end to end against real servers on loopback), the demo, and the Python and
# TypeScript agents against the real binaries. Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
started=$SECONDS

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
