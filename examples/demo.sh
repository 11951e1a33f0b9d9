#!/usr/bin/env bash
# The toolmesh demo in one command, from anywhere in the repo:
#   ./examples/demo.sh [--keep-logs] [--lease-ttl 3s] ...
# Builds every binary of the workspace, then runs the launcher, which starts
# the registry, the inventory service, a sidecar and a Rust SDK tool, runs
# the agent, and stops everything. Exit status 0 = every expected outcome
# was observed. Respects CARGO_TARGET_DIR.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

echo "building the workspace binaries (cargo build --workspace --bins) ..." >&2
cargo build --workspace --bins --quiet

target_dir="${CARGO_TARGET_DIR:-target}"
exec "$target_dir/debug/toolmesh-demo" "$@"
