#!/usr/bin/env bash
# The contract's checks, in the test command:
#   buf lint       proto/ against proto/buf.yaml;
#   buf breaking   proto/ against the last commit's proto (the commit before
#                  HEAD, or HEAD itself when the tree has uncommitted proto
#                  changes), so an incompatible change fails unless it comes
#                  as a new package version;
#   a self-check   that a breaking change (a renumbered field) is caught.
# Installs buf from npm (@bufbuild/buf, pinned in scripts/buf/).
set -euo pipefail
cd "$(dirname "$0")/.."

(
    cd scripts/buf
    if ! cmp -s package-lock.json node_modules/.installed-package-lock.json; then
        npm ci --no-audit --no-fund --loglevel=error
        cp package-lock.json node_modules/.installed-package-lock.json
    fi
)
buf=$PWD/scripts/buf/node_modules/.bin/buf
"$buf" --version

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "buf lint"
(cd proto && "$buf" lint)

if ! git diff --quiet HEAD -- proto/proto; then
    base=HEAD
elif git rev-parse -q --verify 'HEAD~1^{commit}' >/dev/null; then
    base=HEAD~1
else
    base=HEAD
    echo "note: no commit before HEAD in this clone: comparing with HEAD itself"
fi
echo "buf breaking against $(git rev-parse --short "$base")"
mkdir -p "$work/base"
git archive "$base" proto/proto | tar -x -C "$work/base"
(cd proto && "$buf" breaking --against "$work/base/proto/proto")

echo "self-check: a renumbered field must be reported"
mkdir -p "$work/changed"
cp -r proto/buf.yaml proto/proto "$work/changed/"
sed -i '0,/^  string name = 1;/s//  string name = 99;/' "$work/changed/proto/toolmesh/v1/toolmesh.proto"
if grep -q 'string name = 99;' "$work/changed/proto/toolmesh/v1/toolmesh.proto" &&
    ! (cd "$work/changed" && "$buf" breaking --against "$OLDPWD/proto/proto" >"$work/report" 2>&1); then
    sed 's/^/  caught: /' "$work/report"
else
    echo "buf breaking did not report a renumbered field" >&2
    cat "$work/report" >&2 || true
    exit 1
fi
echo "contract checks passed"
