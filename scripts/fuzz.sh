#!/usr/bin/env bash
# Fuzzes toolmesh's parsers and validators with cargo-fuzz (libFuzzer, the
# crate in fuzz/), each target for a bounded time:
#   arguments            validate::parse_arguments, compile and check (registry)
#   sidecar_yaml         SidecarConfig::from_yaml_str and validate (sidecar)
#   arguments_shorthand  arguments::compile (sidecar)
#   descriptor           descriptor::check and differences (registry)
#   auth_files           the API-key, JWT-key, policy and registrants files (registry)
# Each run starts from a copy of fuzz/corpus/<target> (with fuzz/dict/<target>.dict
# when there is one) in a temp dir: the work tree's corpus is never written.
# Prints one line per target: runs executed, time, corpus and coverage.
# On a crash, a leak, an out-of-memory or a timeout, names the target and
# the reproducer (kept in fuzz/artifacts/<target>/), prints the end of
# the fuzzer's output, and exits non-zero once every target has run.
#
# Installs cargo-fuzz when it is missing; builds with the nightly toolchain
# that rustup already has (installs none). Quiet when all is installed.
#
# The targets build unoptimized but for the crates that parse and match
# (fuzz/Cargo.toml's profile): the build takes minutes less, each run does
# most of its work in optimized code. FUZZ_OPT_LEVEL=3 optimizes all of it,
# for a longer hunt.
#
# Usage: scripts/fuzz.sh [--build-only] [TARGET...]   (default: every target)
#   --build-only  build the targets and stop (the suite builds them while
#                 its other tests run)
# Env: FUZZ_SECONDS  time per target (default 20)
#      FUZZ_JOBS     targets run at once (default: the number of cores)
#      FUZZ_RSS_MB   memory limit per target, in MiB (default 2048)
#      FUZZ_SANITIZER  none (default: the workspace forbids `unsafe`, and
#                    the build takes a fraction of the time) or address, for
#                    a longer hunt that also checks the dependencies' unsafe code
#      FUZZ_OPT_LEVEL  0 to 3: every crate's optimization level (default:
#                    fuzz/Cargo.toml's, 0 with the parsing crates at 1)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

all_targets=(arguments sidecar_yaml arguments_shorthand descriptor auth_files)
targets=()
build_only=0
for arg in "$@"; do
    case $arg in
        -h | --help) usage; exit 0 ;;
        --build-only) build_only=1 ;;
        -*) echo "fuzz.sh: unknown option: $arg (see --help)" >&2; exit 2 ;;
        *)
            if [[ ! -f fuzz/fuzz_targets/$arg.rs ]]; then
                echo "fuzz.sh: no fuzz target $arg (fuzz/fuzz_targets/$arg.rs); targets: ${all_targets[*]}" >&2
                exit 2
            fi
            targets+=("$arg")
            ;;
    esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")

seconds=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-$(nproc)}
rss_mb=${FUZZ_RSS_MB:-2048}
sanitizer=${FUZZ_SANITIZER:-none}
if [[ $sanitizer != none && $sanitizer != address ]]; then
    echo "fuzz.sh: FUZZ_SANITIZER must be none or address, not $sanitizer" >&2
    exit 2
fi
opt_level=${FUZZ_OPT_LEVEL:-}
if [[ -n $opt_level && ! $opt_level =~ ^[0-3]$ ]]; then
    echo "fuzz.sh: FUZZ_OPT_LEVEL must be 0, 1, 2 or 3, not $opt_level" >&2
    exit 2
fi
for var in FUZZ_SECONDS:$seconds FUZZ_JOBS:$jobs FUZZ_RSS_MB:$rss_mb; do
    if [[ ! ${var#*:} =~ ^[1-9][0-9]*$ ]]; then
        echo "fuzz.sh: ${var%%:*} must be a whole number above 0, not ${var#*:}" >&2
        exit 2
    fi
done
# One input taking this long is a finding (the registry validates every call).
unit_timeout=10

nightly=$(rustup toolchain list | awk '/^nightly/ {print $1; exit}')
if [[ -z $nightly ]]; then
    echo "fuzz.sh: no nightly toolchain in \`rustup toolchain list\`; cargo-fuzz needs one" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    # A debug build: it only drives cargo and libFuzzer.
    cargo install --locked --quiet --debug cargo-fuzz
fi

# The fuzz crate is a workspace of its own; its lock starts as a copy of the
# root one, so that the targets fuzz the dependency versions that ship.
if [[ ! -f fuzz/Cargo.lock || Cargo.lock -nt fuzz/Cargo.lock ]]; then
    cp Cargo.lock fuzz/Cargo.lock
fi

triple=$(rustc "+$nightly" -vV | sed -n 's/^host: //p')
# One target directory per build flavour, so that switching rebuilds nothing.
target_dir=$PWD/fuzz/target/$sanitizer${opt_level:+-O$opt_level}
bin_dir=$target_dir/$triple/release
for target in "${targets[@]}"; do
    if [[ ! -x $bin_dir/$target ]]; then
        echo "fuzz.sh: building the fuzz targets (the first build takes minutes)" >&2
        break
    fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A level in RUSTFLAGS (which cargo-fuzz passes on after its own flags)
# comes after the profile's, per-crate levels included, and so wins.
build_env=()
[[ -n $opt_level ]] && build_env=("RUSTFLAGS=${RUSTFLAGS:+$RUSTFLAGS }-C opt-level=$opt_level")
if ! env "${build_env[@]}" \
    cargo "+$nightly" fuzz build --sanitizer "$sanitizer" --target "$triple" --target-dir "$target_dir" \
    >"$work/build.log" 2>&1; then
    cat "$work/build.log" >&2
    echo "fuzz.sh: cargo fuzz build failed" >&2
    exit 1
fi
((build_only)) && exit 0

# Runs one target; its output goes to $work/<target>.log, its exit status
# to $work/<target>.rc.
fuzz_one() {
    local target=$1 corpus=$work/corpus/$1 artifacts=fuzz/artifacts/$1 status=0
    local args=(
        -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout="$unit_timeout"
        -artifact_prefix="$artifacts/"
    )
    [[ -f fuzz/dict/$target.dict ]] && args+=(-dict="fuzz/dict/$target.dict")
    mkdir -p "$corpus" "$artifacts"
    if [[ -d fuzz/corpus/$target ]]; then
        cp -R "fuzz/corpus/$target/." "$corpus/"
    fi
    "$bin_dir/$target" "${args[@]}" "$corpus" >"$work/$target.log" 2>&1 || status=$?
    echo "$status" >"$work/$target.rc"
}

running=0
for target in "${targets[@]}"; do
    if ((running >= jobs)); then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$target" &
    running=$((running + 1))
done
wait

failed=0
for target in "${targets[@]}"; do
    log=$work/$target.log
    status=$(cat "$work/$target.rc" 2>/dev/null || echo 1)
    # libFuzzer's closing lines: "#N DONE cov: C ft: F corp: K/…" and
    # "Done N runs in S second(s)".
    runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' "$log")
    seeds=$(find "fuzz/corpus/$target" -type f 2>/dev/null | wc -l)
    corpus=$(find "$work/corpus/$target" -type f | wc -l)
    cov=$(grep -oE '(DONE|INITED) +cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
    if [[ $status == 0 ]]; then
        printf '%-20s %s, corpus %d -> %d, cov %s\n' "$target" "${runs:-? runs}" "$seeds" "$corpus" "${cov:-?}"
        continue
    fi
    failed=1
    reproducer=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "fuzz.sh: $target failed (exit status $status); the fuzzer's output ends (progress lines left out):" >&2
    grep -vE '^(#[0-9]+[[:space:]]|INFO: |[[:space:]]+NEW_FUNC)' "$log" | tail -n 60 >&2
    if [[ -n $reproducer ]]; then
        echo "fuzz.sh: $target: reproducer $reproducer" >&2
        echo "  rerun:    ${bin_dir#"$PWD"/}/$target $reproducer" >&2
        echo "  minimize: cargo +$nightly fuzz tmin $target $reproducer" >&2
    else
        echo "fuzz.sh: $target: no reproducer written; see the output above" >&2
    fi
done
exit "$failed"
