#!/usr/bin/env bash
# Regenerates the Python stubs under zkgate/v1/ from proto/zkgate/v1/*.proto with the pinned
# grpcio-tools (requirements-dev.txt). With an argument, writes them there instead (the test
# tests/python_client.rs does that and compares, so stale stubs fail CI).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$here}"
mkdir -p "$out"
python3 -m grpc_tools.protoc \
    -I "$repo/proto" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    "$repo"/proto/zkgate/v1/*.proto
