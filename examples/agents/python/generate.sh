#!/usr/bin/env bash
# Generates the Python stubs for the toolmesh contract into gen/ beside this
# script (not committed). Needs grpcio-tools (pip install -r requirements.txt).
#
#   ./generate.sh [--proto-dir DIR]
#
# DIR holds toolmesh/v1/toolmesh.proto: --proto-dir, else $TOOLMESH_PROTO_DIR,
# else the repository's proto/proto (found from this script's own location,
# so it runs from any working directory). A relative DIR is relative to the
# working directory it is given in. PYTHON picks the interpreter (python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage="usage: generate.sh [--proto-dir DIR]  (or TOOLMESH_PROTO_DIR=DIR)"
proto_dir="${TOOLMESH_PROTO_DIR:-}"
while (($#)); do
  case "$1" in
    --proto-dir) (($# >= 2)) || { echo "generate.sh: error: --proto-dir needs a folder; $usage" >&2; exit 2; }
                 proto_dir="$2"; shift 2 ;;
    --proto-dir=*) proto_dir="${1#*=}"; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "generate.sh: error: unknown argument ${1@Q}; $usage" >&2; exit 2 ;;
  esac
done
proto_dir="${proto_dir:-$here/../../../proto/proto}"
if [[ ! -f "$proto_dir/toolmesh/v1/toolmesh.proto" ]]; then
  echo "generate.sh: error: no toolmesh/v1/toolmesh.proto in ${proto_dir@Q}: pass --proto-dir DIR or set TOOLMESH_PROTO_DIR to the folder holding it (the toolmesh repository's proto/proto)" >&2
  exit 2
fi
proto_dir="$(cd "$proto_dir" && pwd)"

cd "$here"
rm -rf gen
mkdir -p gen
"${PYTHON:-python3}" -m grpc_tools.protoc \
  -I "$proto_dir" \
  --python_out=gen --grpc_python_out=gen --pyi_out=gen \
  toolmesh/v1/toolmesh.proto
echo "generated $(find gen -name '*.py*' | wc -l) files in $here/gen from $proto_dir"
