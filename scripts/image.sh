#!/usr/bin/env bash
# Builds toolmesh's images with podman, offline:
#   localhost/toolmesh:dev                   the registry and the sidecar (Dockerfile)
#   localhost/toolmesh-example-inventory:dev the example HTTP service (examples/Containerfile.inventory)
# from static binaries it builds first in target/static (glibc and mimalloc
# linked in, symbols stripped; the `dist` profile: whole-program optimized,
# the build docs/benchmarks.md measures), then prints each image's size.
# Installs podman when it is missing (scripts/podman.sh).
#
# Usage: scripts/image.sh [--tag TAG] [--profile PROFILE] [--no-cargo | --binaries-only | --bin-dir DIR] [--quiet]
#   --tag TAG    tag both images TAG instead of `dev` (env TOOLMESH_IMAGE_TAG)
#   --profile PROFILE  the cargo profile of the binaries: `dist` (the
#                default), `release` (minutes quicker to build, slower calls)
#                or `suite` (the test suite's: cheaper still; not for
#                running) (env TOOLMESH_IMAGE_PROFILE)
#   --no-cargo   take the binaries already in target/static
#   --bin-dir DIR  take static binaries built elsewhere, in DIR, and strip
#                copies of them: the test suite's own build (scripts/test.sh)
#                (env TOOLMESH_IMAGE_BIN_DIR)
#   --binaries-only  build the static binaries and stop (no podman)
#   --quiet      no cargo or podman build output; the sizes are still printed
# Env: TOOLMESH_IMAGE (default localhost/toolmesh) and
#      TOOLMESH_EXAMPLE_IMAGE (default localhost/toolmesh-example-inventory)
#      name the images.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

tag=${TOOLMESH_IMAGE_TAG:-dev}
profile=${TOOLMESH_IMAGE_PROFILE:-dist}
cargo=1
binaries_only=0
from_dir=${TOOLMESH_IMAGE_BIN_DIR:-}
quiet=0
while (($#)); do
    case $1 in
        --tag) tag=${2:?--tag needs a value}; shift 2 ;;
        --tag=*) tag=${1#--tag=}; shift ;;
        --profile) profile=${2:?--profile needs a value}; shift 2 ;;
        --profile=*) profile=${1#--profile=}; shift ;;
        --no-cargo) cargo=0; shift ;;
        --binaries-only) binaries_only=1; shift ;;
        --bin-dir) from_dir=${2:?--bin-dir needs a value}; shift 2 ;;
        --bin-dir=*) from_dir=${1#--bin-dir=}; shift ;;
        --quiet) quiet=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "image.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
image="${TOOLMESH_IMAGE:-localhost/toolmesh}:$tag"
example_image="${TOOLMESH_EXAMPLE_IMAGE:-localhost/toolmesh-example-inventory}:$tag"

case $profile in
    release | dist | suite) ;;
    *) echo "image.sh: --profile must be release, dist or suite, not $profile" >&2; exit 2 ;;
esac
if ((binaries_only && !cargo)); then
    echo "image.sh: --binaries-only and --no-cargo leave nothing to do" >&2
    exit 2
fi
if [[ -n $from_dir ]] && ((binaries_only || !cargo)); then
    echo "image.sh: --bin-dir takes the binaries from elsewhere: not with --binaries-only or --no-cargo" >&2
    exit 2
fi
started=$SECONDS
((binaries_only)) || . scripts/podman.sh

# The static build has a target directory of its own: its RUSTFLAGS would
# otherwise rebuild everything the debug and test builds share. It must stay
# under target/ (the build context; see .dockerignore).
triple=x86_64-unknown-linux-gnu
bin_dir=target/static/$triple/$profile
bins=(toolmesh-registry toolmesh-sidecar inventory-service)
if [[ -n $from_dir ]]; then
    # The copies go where the build context lets them in (.dockerignore),
    # stripped as the profiles' own builds strip theirs.
    bin_dir=target/static/$triple/prebuilt
    mkdir -p "$bin_dir"
    for bin in "${bins[@]}"; do
        if [[ ! -x $from_dir/$bin ]]; then
            echo "image.sh: $from_dir/$bin is missing" >&2
            exit 1
        fi
        strip --strip-all -o "$bin_dir/$bin.tmp" "$from_dir/$bin"
        mv -f "$bin_dir/$bin.tmp" "$bin_dir/$bin"
    done
elif ((cargo)); then
    cargo_args=(build --profile "$profile" --locked --target "$triple")
    for bin in "${bins[@]}"; do cargo_args+=(--bin "$bin"); done
    ((quiet)) && cargo_args+=(--quiet)
    # --target is explicit so that only the binaries are static, not the
    # build scripts and proc-macros cargo runs on the host. The caller's
    # RUSTFLAGS are replaced, so that the build is the same whoever runs it.
    env -u CARGO_ENCODED_RUSTFLAGS \
        CARGO_TARGET_DIR=target/static \
        RUSTFLAGS="-C target-feature=+crt-static" \
        "CARGO_PROFILE_$(tr 'a-z-' 'A-Z_' <<<"$profile")_STRIP=symbols" \
        cargo "${cargo_args[@]}"
fi
for bin in "${bins[@]}"; do
    if [[ ! -x $bin_dir/$bin ]]; then
        echo "image.sh: $bin_dir/$bin is missing: run without --no-cargo" >&2
        exit 1
    fi
    # A dynamically linked binary names its loader (INTERP) and cannot run
    # on scratch.
    if LC_ALL=C readelf -lW "$bin_dir/$bin" | grep -q 'INTERP'; then
        echo "image.sh: $bin_dir/$bin is dynamically linked: the image needs a static binary" >&2
        exit 1
    fi
done
((binaries_only)) && exit 0

# The workspace's version (`path+file:///…#toolmesh-registry@0.1.0`) and the
# commit, for the OCI labels.
version=$(cargo pkgid --offline -p toolmesh-registry)
version=${version##*[@#]}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ $revision != unknown ]] && ! git diff --quiet HEAD -- 2>/dev/null; then
    revision+=-dirty
fi
# The image's creation time is the commit's (as SOURCE_DATE_EPOCH would
# be): the same binaries make the same image, and a rebuild with nothing
# changed keeps the image's id.
timestamp=()
if commit_time=$(git log -1 --format=%ct 2>/dev/null) && [[ -n $commit_time ]]; then
    timestamp=(--timestamp "$commit_time")
fi

build() { # $1: image name, $2: Containerfile
    local old new
    old=$(podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true)
    # --layers=false: one image, no intermediate images left behind (each
    # would hold the binaries' layer); the build takes a second anyway.
    local args=(build --pull=never --layers=false "${timestamp[@]}" -f "$2" -t "$1"
        --build-arg "BIN_DIR=$bin_dir"
        --build-arg "VERSION=$version"
        --build-arg "REVISION=$revision")
    if ((quiet)); then
        timeout 300 podman "${args[@]}" --quiet . >/dev/null
    else
        timeout 300 podman "${args[@]}" .
    fi
    # The image this tag named before is left without a name: remove it
    # (only that one, and not while a container uses it), so that rebuilds
    # do not pile up.
    new=$(podman image inspect --format '{{.Id}}' "$1")
    if [[ -n $old && $old != "$new" ]] &&
        [[ -z $(podman image inspect --format '{{join .RepoTags ""}}' "$old" 2>/dev/null) ]]; then
        podman rmi "$old" >/dev/null 2>&1 || true
    fi
}
build "$image" Dockerfile
build "$example_image" examples/Containerfile.inventory

for name in "$image" "$example_image"; do
    bytes=$(podman image inspect --format '{{.Size}}' "$name")
    awk -v name="$name" -v bytes="$bytes" 'BEGIN {printf "%-52s %5.1f MB\n", name, bytes / 1e6}'
done
echo "image.sh: built in $((SECONDS - started)) s"
