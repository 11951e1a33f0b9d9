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
    # Without the fat LTO and single codegen unit its own release profile
    # asks for: a fraction of the build time (minutes, on 2 cores) for a
    # tool that runs for seconds.
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        cargo install --locked --quiet cargo-deny
fi
(($#)) || set -- licenses bans sources
exec cargo deny --locked check --hide-inclusion-graph "$@"
