#!/usr/bin/env bash
# Checks the workspace's dependency tree against deny.toml with cargo-deny:
# licenses (permissive ones only), bans (no wildcard versions; several
# versions of one crate are warnings) and sources (crates.io only).
# Installs cargo-deny when it is missing. Exits non-zero on any error.
#
# Usage: scripts/deny.sh [CHECK...]   (default: licenses bans sources)
# Duplicate-version warnings are printed without their inclusion graphs;
# `cargo deny check bans` shows them.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo deny --version >/dev/null 2>&1; then
    echo "deny.sh: installing cargo-deny" >&2
    # A debug build: cargo-deny runs for seconds here, and its optimized
    # build (gix and the rest) was minutes of a cold suite on 2 cores.
    cargo install --locked --quiet --debug cargo-deny
fi
(($#)) || set -- licenses bans sources
exec cargo deny --locked check --hide-inclusion-graph "$@"
