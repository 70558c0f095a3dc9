#!/usr/bin/env bash
# Regenerates the Java stubs under src/generated/java/ from proto/zkgate/v1/*.proto with
# Debian's protoc (protobuf-compiler) and gRPC Java plugin (protobuf-compiler-grpc-java-plugin).
# With an argument, writes them there instead: tests/java_client.rs does that and compares, so
# stale stubs fail CI. The generated code matches Debian's libprotobuf-java and libgrpc-java.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$here/src/generated/java}"
plugin="$(command -v grpc_java_plugin || true)"
if ! command -v protoc >/dev/null || [ -z "$plugin" ]; then
    echo "regen.sh: needs protoc and grpc_java_plugin:" \
        "apt-get install protobuf-compiler protobuf-compiler-grpc-java-plugin" >&2
    exit 1
fi
rm -rf "$out/io/zkgate/v1"
mkdir -p "$out"
protoc -I "$repo/proto" \
    --java_out="$out" \
    --plugin=protoc-gen-grpc-java="$plugin" --grpc-java_out="$out" \
    "$repo"/proto/zkgate/v1/*.proto
