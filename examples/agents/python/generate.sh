#!/usr/bin/env bash
# Generates the Python stubs for the toolmesh contract into gen/ (not committed).
# Needs grpcio-tools (pip install -r requirements.txt).
set -euo pipefail
cd "$(dirname "$0")"
PROTO_ROOT=../../../proto/proto
rm -rf gen
mkdir -p gen
"${PYTHON:-python3}" -m grpc_tools.protoc \
  -I "$PROTO_ROOT" \
  --python_out=gen --grpc_python_out=gen --pyi_out=gen \
  toolmesh/v1/toolmesh.proto
echo "generated $(find gen -name '*.py*' | wc -l) files in $(pwd)/gen"
