#!/usr/bin/env bash
# The toolmesh demo in one command, from anywhere in the repo:
#   ./examples/demo.sh [--keep-logs] [--lease-ttl 3s] ...
# Builds every binary of the workspace (the debug build README's "Running it
# yourself" and the test suite use: nothing to build again for either), with
# cargo's own progress, then runs the launcher, which starts the registry,
# the inventory service, a sidecar and a Rust SDK tool, runs the agent, and
# stops everything. Exit status 0 = every expected outcome was observed.
# Respects CARGO_TARGET_DIR.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

echo "==> cargo build --workspace --bins (4 to 8 min the first time on 2 cores, seconds after)" >&2
cargo build --workspace --bins

target_dir="${CARGO_TARGET_DIR:-target}"
echo "==> $target_dir/debug/toolmesh-demo${*:+ $*}" >&2
exec "$target_dir/debug/toolmesh-demo" "$@"
