#!/usr/bin/env bash
# Tests the example agents (Python and TypeScript) against the real toolmesh
# binaries. Needs them built first: cargo build --workspace --bins
#
# From a clean clone it installs the dependencies (pip into the current
# Python, npm ci into typescript/node_modules), generates the stubs from
# proto/ into python/gen and typescript/gen, and runs both suites. Both suites
# always run; the exit status is non-zero if either failed.
#
# Environment: TOOLMESH_BIN_DIR (default: <repo>/target/debug), PYTHON (default: python3).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export TOOLMESH_BIN_DIR="${TOOLMESH_BIN_DIR:-$HERE/../../target/debug}"
PYTHON="${PYTHON:-python3}"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

for binary in toolmesh-registry toolmesh-sidecar; do
  if [[ ! -x "$TOOLMESH_BIN_DIR/$binary" ]]; then
    echo "error: $TOOLMESH_BIN_DIR/$binary not found; run cargo build --workspace --bins" >&2
    exit 2
  fi
done

python_suite() {
  cd "$HERE/python" &&
    "$PYTHON" -m pip install --quiet -r requirements.txt &&
    PYTHON="$PYTHON" ./generate.sh &&
    "$PYTHON" -m pytest -q -p no:cacheprovider test_agent.py test_docs.py
}

typescript_suite() {
  cd "$HERE/typescript" || return
  # npm ci wipes node_modules; skip it when the lockfile is what was installed.
  if ! cmp -s package-lock.json node_modules/.installed-package-lock.json; then
    npm ci --no-audit --no-fund --loglevel=error &&
      cp package-lock.json node_modules/.installed-package-lock.json || return
  fi
  npm run --silent generate &&
    npm run --silent typecheck &&
    npm test --silent
}

failed=()
for suite in python typescript; do
  echo "=== $suite agent"
  started=$SECONDS
  if ("${suite}_suite"); then
    echo "=== $suite agent: ok ($((SECONDS - started))s)"
  else
    echo "=== $suite agent: FAILED ($((SECONDS - started))s)"
    failed+=("$suite")
  fi
done

if ((${#failed[@]})); then
  echo "agent tests failed: ${failed[*]}" >&2
  exit 1
fi
echo "agent tests passed"
