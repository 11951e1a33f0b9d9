#!/usr/bin/env bash
# The console in a real browser: registry/tests/browser (pytest, Playwright
# driving Debian's Chromium) against the real registry and sidecar on
# loopback ports. Installs what is missing: chromium and chromium-driver
# (Debian), the Python packages of registry/tests/browser/requirements.txt
# (PyPI). Playwright never downloads a browser of its own.
#
# The binaries must be built first:
#   cargo build -p toolmesh-registry -p toolmesh-sidecar --bins
#
# Usage: scripts/browser.sh [PYTEST ARGS...]
# Environment: TOOLMESH_BIN_DIR (default: <repo>/target/debug), PYTHON
# (default: python3). Screenshots land in target/console-screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."

export TOOLMESH_BIN_DIR="${TOOLMESH_BIN_DIR:-$PWD/target/debug}"
PYTHON="${PYTHON:-python3}"
for binary in toolmesh-registry toolmesh-sidecar; do
    if [[ ! -x "$TOOLMESH_BIN_DIR/$binary" ]]; then
        echo "browser.sh: $TOOLMESH_BIN_DIR/$binary not found; run cargo build -p toolmesh-registry -p toolmesh-sidecar --bins" >&2
        exit 2
    fi
done

if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    export DEBIAN_FRONTEND=noninteractive
    ${SUDO:-} apt-get update -qq
    ${SUDO:-} apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
/usr/bin/chromium --version 2>/dev/null

export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$PYTHON" -m pip install --quiet -r registry/tests/browser/requirements.txt

exec "$PYTHON" -m pytest -q -p no:cacheprovider registry/tests/browser "$@"
